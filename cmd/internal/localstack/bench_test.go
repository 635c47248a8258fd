package localstack

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
