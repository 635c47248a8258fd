package reconcilefn

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/counter/counterstore"
)

type fakeStore struct{ scopes []counterstore.Scope }

func (f *fakeStore) ReconcileUntil(_ context.Context, scope counterstore.Scope, _ []counterstore.Source, until time.Time) (counterstore.ReconcileReport, error) {
	if until.IsZero() || until.After(time.Now().Add(9*time.Minute)) {
		panic("the run is not bounded by the invocation's time")
	}
	f.scopes = append(f.scopes, scope)
	return counterstore.ReconcileReport{}, nil
}

func (f *fakeStore) CloseRun(context.Context, string) (counterstore.RunStatus, bool, error) {
	return counterstore.RunStatus{}, false, nil
}

func (f *fakeStore) WorkSlices(_ context.Context, _ []counterstore.Source, o counterstore.WorkOptions) (counterstore.WorkReport, error) {
	if o.Until.IsZero() || o.Run != "" {
		panic("slices are worked for every run, bounded by the invocation's time")
	}
	f.scopes = append(f.scopes, "slices")
	return counterstore.WorkReport{}, nil
}

func TestScopes(t *testing.T) {
	tests := []struct {
		name, body string
		code       int
		scope      counterstore.Scope
	}{
		{"bare POST checks all", ``, 200, counterstore.All},
		{"hourly", `{"scope":"recent"}`, 200, counterstore.Recent},
		{"daily", `{"scope":"all"}`, 200, counterstore.All},
		{"open slices", `{"scope":"slices"}`, 200, "slices"},
		{"unknown scope", `{"scope":"some"}`, 400, ""},
		{"unknown field", `{"scope":"all","x":1}`, 400, ""},
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
			if tt.code != 200 && len(s.scopes) != 0 {
				t.Errorf("a refused request reconciled %v", s.scopes)
			}
		})
	}
}
