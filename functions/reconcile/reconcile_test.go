package reconcilefn

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

type fakeStore struct{ scopes []reconcilestore.Scope }

func (f *fakeStore) ReconcileUntil(_ context.Context, scope reconcilestore.Scope, _ []reconcilestore.Source, until time.Time) (reconcilestore.Report, error) {
	if until.IsZero() || until.After(time.Now().Add(9*time.Minute)) {
		panic("the run is not bounded by the invocation's time")
	}
	f.scopes = append(f.scopes, scope)
	return reconcilestore.Report{}, nil
}

func (f *fakeStore) CloseRun(context.Context, string) (reconcilestore.RunStatus, bool, error) {
	return reconcilestore.RunStatus{}, false, nil
}

func (f *fakeStore) WorkSlices(_ context.Context, _ []reconcilestore.Source, o reconcilestore.WorkOptions) (reconcilestore.WorkReport, error) {
	if o.Until.IsZero() || o.Run != "" {
		panic("slices are worked for every run, bounded by the invocation's time")
	}
	f.scopes = append(f.scopes, "slices")
	return reconcilestore.WorkReport{}, nil
}

func TestScopes(t *testing.T) {
	tests := []struct {
		name, body string
		code       int
		scope      reconcilestore.Scope
		reason     errs.Reason
	}{
		{"bare POST checks all", ``, 200, reconcilestore.All, ""},
		{"hourly", `{"scope":"recent"}`, 200, reconcilestore.Recent, ""},
		{"daily", `{"scope":"all"}`, 200, reconcilestore.All, ""},
		{"open slices", `{"scope":"slices"}`, 200, "slices", ""},
		{"unknown scope", `{"scope":"some"}`, 400, "", errs.InvalidValue},
		{"unknown field", `{"scope":"all","x":1}`, 400, "", errs.UnknownField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeStore{}
			rec := httptest.NewRecorder()
			New(Deps{Store: s}).ServeHTTP(rec, httptest.NewRequest("POST", "/internal/reconcile", strings.NewReader(tt.body)))
			if rec.Code != tt.code {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.code, rec.Body)
			}
			if tt.code == 200 && (len(s.scopes) != 1 || s.scopes[0] != tt.scope) {
				t.Errorf("reconciled %v, want [%s]", s.scopes, tt.scope)
			}
			if got := apitest.ReasonOf(rec.Body.Bytes()); got != tt.reason {
				t.Errorf("reason %q, want %q: %s", got, tt.reason, rec.Body)
			}
			if tt.code != 200 && len(s.scopes) != 0 {
				t.Errorf("a refused request reconciled %v", s.scopes)
			}
		})
	}
}

type fakeFlags struct {
	store *fakeStore
	done  bool
	// calls counts ApplyFlags, backfills BackfillTallies.
	calls, backfills int
}

func (f *fakeFlags) ApplyFlags(_ context.Context, until time.Time) (reactionstore.FlagReport, error) {
	if until.IsZero() {
		panic("flags applied without the invocation's bound")
	}
	if len(f.store.scopes) != 0 {
		panic("flags applied after the reconciliation started")
	}
	f.calls++
	return reactionstore.FlagReport{Done: f.done}, nil
}

func (f *fakeFlags) BackfillTallies(_ context.Context, until time.Time) (reactionstore.BackfillReport, error) {
	if until.IsZero() {
		panic("tallies completed without the invocation's bound")
	}
	if len(f.store.scopes) != 0 || f.calls == 0 {
		panic("tallies completed after the reconciliation started or before the flags")
	}
	f.backfills++
	return reactionstore.BackfillReport{Done: true}, nil
}

// TestHourlyAppliesFlagsFirst: the hourly run starts once the tallies hold
// every flag change, and waits for the next invocation when they do not;
// the daily run applies them first too but starts in any case; either
// completes the tallies older than them next, once the hourly run is to
// start; the per-minute slices leave both alone.
func TestHourlyAppliesFlagsFirst(t *testing.T) {
	for _, tt := range []struct {
		body, name string
		done       bool
		calls      int
		backfills  int
		scopes     []reconcilestore.Scope
	}{
		{`{"scope":"recent"}`, "hourly, flags applied", true, 1, 1, []reconcilestore.Scope{reconcilestore.Recent}},
		{`{"scope":"recent"}`, "hourly, flags not all applied", false, 1, 0, nil},
		{`{"scope":"all"}`, "daily", false, 1, 1, []reconcilestore.Scope{reconcilestore.All}},
		{`{"scope":"slices"}`, "slices", false, 0, 0, []reconcilestore.Scope{"slices"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &fakeStore{}
			f := &fakeFlags{store: s, done: tt.done}
			rec := httptest.NewRecorder()
			New(Deps{Store: s, Flags: f}).ServeHTTP(rec, httptest.NewRequest("POST", "/internal/reconcile", strings.NewReader(tt.body)))
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if f.calls != tt.calls || f.backfills != tt.backfills || !slices.Equal(s.scopes, tt.scopes) {
				t.Errorf("flags applied %d times, tallies completed %d, reconciled %v; want %d, %d, %v", f.calls, f.backfills, s.scopes, tt.calls, tt.backfills, tt.scopes)
			}
		})
	}
}
