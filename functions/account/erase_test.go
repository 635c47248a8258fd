package accountfn

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
)

// erasure records the erase calls that write in order, and fails the one
// named by fail; it keeps the records requested and the settings marked,
// as the stores do.
type erasure struct {
	calls  []string
	fail   string
	open   map[string]bool
	marked map[string]bool
}

func newErasure(fail string) *erasure {
	return &erasure{fail: fail, open: map[string]bool{}, marked: map[string]bool{}}
}

// records is the erasure records (Request, Get) of an erasure.
type records struct{ *erasure }

func (r records) Get(_ context.Context, user string) (account.Erasure, bool, error) {
	if !r.open[user] {
		return account.Erasure{}, false, nil
	}
	return account.Erasure{UserID: user, Phase: account.Reactions}, true, nil
}

func (e *erasure) do(call string) error {
	e.calls = append(e.calls, call)
	if call == e.fail {
		return errs.Unavailable(call, errors.New("backend down"))
	}
	return nil
}

func (e *erasure) Request(_ context.Context, user string) (account.Erasure, error) {
	err := e.do("request " + user)
	if err == nil {
		e.open[user] = true
	}
	return account.Erasure{UserID: user, Phase: account.Reactions}, err
}

func (e *erasure) Get(_ context.Context, user string) (history.Settings, error) {
	return history.Settings{Erasing: e.marked[user]}, nil
}

func (e *erasure) Append(_ context.Context, user string, at time.Time) error {
	if at.IsZero() {
		return errors.New("no request time")
	}
	return e.do("log " + user)
}

func (e *erasure) MarkErasing(_ context.Context, user string) error {
	err := e.do("mark " + user)
	if err == nil {
		e.marked[user] = true
	}
	return err
}

func (e *erasure) Publish(_ context.Context, data []byte, attrs map[string]string) (string, error) {
	m, err := account.DecodeMessage(data)
	if err != nil || attrs["kind"] != "account-erasure" {
		return "", errors.New("not an erasure message")
	}
	return "1", e.do("publish " + m.UserID)
}

// TestErase: DELETE /v1/me appends the erasure to the erasure log, records
// it, marks the history settings and publishes the message that starts it,
// in that order, and answers 202; a failure of any of the four is a 503 that
// the client retries whole (each write is idempotent), so no erasure is
// acknowledged, or recorded anywhere, without its log entry; without a
// token nothing is written.
func TestErase(t *testing.T) {
	for _, tt := range []struct {
		name, token, fail string
		want              int
		calls             []string
	}{
		{name: "accepted", token: "ann", want: http.StatusAccepted, calls: []string{"log ann", "request ann", "mark ann", "publish ann"}},
		{name: "log down", token: "ann", fail: "log ann", want: http.StatusServiceUnavailable, calls: []string{"log ann"}},
		{name: "record down", token: "ann", fail: "request ann", want: http.StatusServiceUnavailable, calls: []string{"log ann", "request ann"}},
		{name: "settings down", token: "ann", fail: "mark ann", want: http.StatusServiceUnavailable, calls: []string{"log ann", "request ann", "mark ann"}},
		{name: "publish down", token: "ann", fail: "publish ann", want: http.StatusServiceUnavailable, calls: []string{"log ann", "request ann", "mark ann", "publish ann"}},
		{name: "no token", want: http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newErasure(tt.fail)
			h := New(Deps{Verifier: fakeVerifier{}, Settings: e, Erasures: records{e}, ErasureLog: e, Publisher: e})
			req := httptest.NewRequest(http.MethodDelete, "/v1/me", nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("answer %d %s, want %d", rec.Code, rec.Body, tt.want)
			}
			if !slices.Equal(e.calls, tt.calls) {
				t.Errorf("calls %q, want %q", e.calls, tt.calls)
			}
			if tt.want == http.StatusAccepted && (rec.Header().Get("Cache-Control") != "no-store" || rec.Body.String() != "{\"erasing\":true}\n") {
				t.Errorf("answer %q %q", rec.Header().Get("Cache-Control"), rec.Body)
			}
		})
	}
}

// limiter admits n calls of each user, then asks them to wait.
type limiter struct {
	n     int
	calls map[string]int
}

func (l *limiter) Allow(_ context.Context, user string) (time.Duration, error) {
	l.calls[user]++
	if l.calls[user] > l.n {
		return 20 * time.Second, nil
	}
	return 0, nil
}

// TestEraseRepeats: a repeat of DELETE /v1/me while the erasure is pending
// answers 202 as the first call did and writes nothing (no second log
// object, record, mark or message), and is not charged to the limit; a
// repeat after a first call that failed part-way (503) starts the erasure
// again whole; calls that would write are limited per user (429 with
// Retry-After, nothing written), another user unaffected.
func TestEraseRepeats(t *testing.T) {
	e := newErasure("")
	lim := &limiter{n: 2, calls: map[string]int{}}
	h := New(Deps{Verifier: fakeVerifier{}, Settings: e, Erasures: records{e}, ErasureLog: e, Publisher: e, EraseLimiter: lim})
	erase := func(user string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodDelete, "/v1/me", nil)
		req.Header.Set("Authorization", "Bearer "+user)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first := erase("ann")
	want := []string{"log ann", "request ann", "mark ann", "publish ann"}
	if first.Code != http.StatusAccepted || !slices.Equal(e.calls, want) {
		t.Fatalf("first call: %d, calls %q", first.Code, e.calls)
	}
	for i := range 5 {
		rec := erase("ann")
		if rec.Code != first.Code || rec.Body.String() != first.Body.String() || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("repeat %d: %d %q, want the first answer %d %q", i, rec.Code, rec.Body, first.Code, first.Body)
		}
	}
	if !slices.Equal(e.calls, want) {
		t.Errorf("repeats wrote: calls %q, want only the first call's %q", e.calls, want)
	}
	if lim.calls["ann"] != 1 {
		t.Errorf("repeats charged to the limit: %d calls", lim.calls["ann"])
	}

	// A first call that failed after the record: the retry starts it whole.
	e.fail = "mark bob"
	if rec := erase("bob"); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("settings down: %d", rec.Code)
	}
	e.fail, e.calls = "", nil
	if rec := erase("bob"); rec.Code != http.StatusAccepted || !slices.Equal(e.calls, []string{"log bob", "request bob", "mark bob", "publish bob"}) {
		t.Fatalf("retry after a partial start: %d, calls %q", rec.Code, e.calls)
	}
	// bob's third call would write (his erasure is not pending once it is
	// done): over the limit, refused, nothing written.
	delete(e.open, "bob")
	e.calls = nil
	rec := erase("bob")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" || len(e.calls) != 0 {
		t.Errorf("over the limit: %d Retry-After %q, calls %q", rec.Code, rec.Header().Get("Retry-After"), e.calls)
	}
	if rec := erase("cy"); rec.Code != http.StatusAccepted {
		t.Errorf("another user: %d", rec.Code)
	}
}
