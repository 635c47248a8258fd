package localstack

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// region is a backend that answers with its name and the body it read,
// counting the requests it got.
func region(t *testing.T, name string) (addr string, got *atomic.Int64) {
	t.Helper()
	got = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, name+":"+string(b))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), got
}

// dead is the address of a region whose process is gone: nothing listens.
func dead(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// dying is a region that takes the request and dies before answering.
func dying(t *testing.T) (addr string, got *atomic.Int64) {
	t.Helper()
	got = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), got
}

func send(t *testing.T, b *Balancer, method, body string) (int, string, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	b.ServeHTTP(rec, httptest.NewRequest(method, "/v1/reactions/intro", r))
	return rec.Code, rec.Body.String(), rec.Header()
}

// A request whose connection to a region fails never reached it: the
// other region takes it, body and all, and the dead one is no longer live.
func TestBalancerConnectFailureGoesToTheOtherRegion(t *testing.T) {
	live, got := region(t, "east")
	b := NewBalancer([]Backend{{"central", dead(t)}, {"east", live}})
	for i := range 4 {
		code, body, _ := send(t, b, "PUT", `{"reaction":"like"}`)
		if code != 200 || body != `east:{"reaction":"like"}` {
			t.Fatalf("request %d: %d %q, want 200 from east with the body", i, code, body)
		}
	}
	if n := got.Load(); n != 4 {
		t.Errorf("east got %d requests, want 4", n)
	}
	if l := b.Live(); len(l) != 1 || l[0] != "east" {
		t.Errorf("live regions %v, want [east]", l)
	}
}

// A write that reached a region which died before answering may have been
// done: it is answered 503 with Retry-After, not sent to the other region.
// A read is sent again.
func TestBalancerNeverReplaysAWriteThatReachedARegion(t *testing.T) {
	gone, gotGone := dying(t)
	live, gotLive := region(t, "east")
	b := NewBalancer([]Backend{{"central", gone}, {"east", live}})
	b.backends[1].live.Store(false) // central is tried first
	code, body, h := send(t, b, "POST", `{"text":"hi"}`)
	if code != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, `"status":"UNAVAILABLE"`) {
		t.Errorf("write to a region that died: %d %v %s, want 503 with Retry-After", code, h, body)
	}
	if gotGone.Load() != 1 || gotLive.Load() != 0 {
		t.Errorf("the dying region got %d, the other %d; want 1 and 0", gotGone.Load(), gotLive.Load())
	}
	code, body, _ = send(t, b, "GET", "")
	if code != 200 || body != "east:" {
		t.Errorf("read: %d %q, want 200 from east", code, body)
	}
}

// With no region answering, the answer is 503 with Retry-After.
func TestBalancerNoRegion(t *testing.T) {
	b := NewBalancer([]Backend{{"central", dead(t)}, {"east", dead(t)}})
	code, body, h := send(t, b, "PUT", `{}`)
	if code != 503 || h.Get("Retry-After") == "" {
		t.Errorf("no region: %d %v %s", code, h, body)
	}
}
