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

// erasure records the erase calls in order, and fails the one named by
// fail.
type erasure struct {
	calls []string
	fail  string
}

func (e *erasure) do(call string) error {
	e.calls = append(e.calls, call)
	if call == e.fail {
		return errs.Unavailable(call, errors.New("backend down"))
	}
	return nil
}

func (e *erasure) Request(_ context.Context, user string) (account.Erasure, error) {
	return account.Erasure{UserID: user, Phase: account.Reactions}, e.do("request " + user)
}

func (e *erasure) Get(context.Context, string) (history.Settings, error) {
	return history.Settings{}, nil
}

func (e *erasure) Append(_ context.Context, user string, at time.Time) error {
	if at.IsZero() {
		return errors.New("no request time")
	}
	return e.do("log " + user)
}

func (e *erasure) MarkErasing(_ context.Context, user string) error { return e.do("mark " + user) }

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
			e := &erasure{fail: tt.fail}
			h := New(Deps{Verifier: fakeVerifier{}, Settings: e, Erasures: e, ErasureLog: e, Publisher: e})
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
