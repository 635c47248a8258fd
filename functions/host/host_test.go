package host

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A build that failed is tried again on the next use; one that succeeded is
// kept. Needs of zero build no client, so no backend is involved.
func TestLazyRetriesAFailedBuild(t *testing.T) {
	calls := 0
	build := func(ctx context.Context, c *Clients) (int, error) {
		calls++
		if calls == 1 {
			return 0, errors.New("backend down")
		}
		if c == nil || c.Config == nil {
			t.Fatal("build got no clients")
		}
		return 42, nil
	}
	l := onFirstUse(0, build)
	if _, err := l.Get(context.Background()); err == nil {
		t.Fatal("first get: want the build error")
	}
	for range 3 {
		v, err := l.Get(context.Background())
		if err != nil || v != 42 {
			t.Fatalf("get = %d, %v; want 42", v, err)
		}
	}
	if calls != 2 {
		t.Errorf("build ran %d times, want 2", calls)
	}
}

// The request's cancellation must not reach clients that outlive it.
func TestLazyBuildsOnAContextThatOutlivesTheRequest(t *testing.T) {
	l := onFirstUse(0, func(ctx context.Context, _ *Clients) (context.Context, error) { return ctx, nil })
	ctx, cancel := context.WithCancel(context.Background())
	got, err := l.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if got.Err() != nil {
		t.Error("the build context was cancelled with the request")
	}
}

// Every answer of an HTTP function carries the security headers, also the
// 503 of a build that failed, before the function's own middleware exists.
func TestHTTPEntryAnswersWithSecurityHeaders(t *testing.T) {
	entry := httpEntry(0, func(context.Context, *Clients) (http.Handler, error) {
		return nil, errors.New("backend down")
	})
	rec := httptest.NewRecorder()
	entry(rec, httptest.NewRequest(http.MethodGet, "/v1/counts?ids=a", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("status %d, want 503", rec.Code)
	}
	if rec.Header().Get("Strict-Transport-Security") == "" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers %v, want Strict-Transport-Security and X-Content-Type-Options", rec.Header())
	}
}
