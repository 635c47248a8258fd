package benchstack

import (
	"io"
	"net/http"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	if p50, p99 := Percentiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("Percentiles(nil) = %v, %v", p50, p99)
	}
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(100-i) * time.Millisecond // 100 ms … 1 ms
	}
	if p50, p99 := Percentiles(d); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Errorf("Percentiles(1..100 ms) = %v, %v; want 50ms, 99ms", p50, p99)
	}
	if p50, p99 := Percentiles([]time.Duration{7}); p50 != 7 || p99 != 7 {
		t.Errorf("Percentiles of one = %v, %v", p50, p99)
	}
}

func TestServerAnswers503UntilSet(t *testing.T) {
	s, err := StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get := func() (int, string) {
		t.Helper()
		resp, err := http.Get(s.PushEndpoint("X"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(); code != http.StatusServiceUnavailable {
		t.Errorf("before Set: %d, want 503", code)
	}
	s.Set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }))
	if code, body := get(); code != 200 || body != "/push/X" {
		t.Errorf("after Set: %d %q, want 200 /push/X", code, body)
	}
}

// Pushes counts an event function's pushes and the time at least one was
// in progress: two pushes held at once count that time once, not twice.
func TestServerCountsPushes(t *testing.T) {
	s, err := StartServer()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	s.Set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/push/X" {
			entered <- struct{}{}
			<-release
		}
	}))
	start := time.Now()
	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(s.PushEndpoint("X"), "application/json", nil)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
	}
	<-entered
	<-entered // both in progress at once
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	window := time.Since(start)
	if resp, err := http.Get(s.URL + "/v1/other"); err == nil {
		resp.Body.Close()
	}
	n, busy := s.Pushes("X")
	if n != 2 || busy <= 0 || busy > window {
		t.Errorf("Pushes = %d, %v; want 2 pushes held for at most the %v both took", n, busy, window)
	}
	if n, _ := s.Pushes("other"); n != 0 {
		t.Errorf("a request that is no push counted as one")
	}
}
