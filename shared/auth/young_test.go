package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/errs"
)

// The young-account rule fails closed: an account the provider created
// less than the age ago is young, an older one or one it has no record of
// is not, and when the provider refuses or does not answer within the
// budget the answer is ErrAccountAgeUnknown (a 503 to a writer), never
// "established". Accounts seen once are not asked for again.
func TestYoungAccountsFailClosed(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	created := map[string]time.Time{"old": now.Add(-48 * time.Hour), "new": now.Add(-time.Hour)}
	release := make(chan struct{})
	defer close(release)
	lookups := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			LocalID []string `json:"localId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		lookups++
		users := []map[string]string{}
		for _, id := range body.LocalID {
			switch id {
			case "down":
				http.Error(w, "unavailable", http.StatusServiceUnavailable)
				return
			case "slow":
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
			if t, ok := created[id]; ok {
				users = append(users, map[string]string{"localId": id, "createdAt": fmt.Sprint(t.UnixMilli())})
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"users": users})
	}))
	defer srv.Close()
	y := NewYoungAccounts(NewAccountCreation(NewAccountRecordsWith(srv.Client(), srv.URL, "p1"), 10), 24*time.Hour)
	y.now = func() time.Time { return now }
	ctx := context.Background()

	got, err := y.YoungAmong(ctx, []string{"old", "new", "unrecorded", "new"})
	if err != nil || len(got) != 1 || !got["new"] {
		t.Fatalf("YoungAmong: %v, %v; want new alone", got, err)
	}
	if young, err := y.Young(ctx, "new"); err != nil || !young || lookups != 1 {
		t.Errorf("Young(new) again: %v, %v after %d lookups; want true from memory", young, err, lookups)
	}
	for _, uid := range []string{"down", "slow"} {
		start := time.Now()
		young, err := y.Young(ctx, uid)
		if !errors.Is(err, ErrAccountAgeUnknown) || !errors.Is(err, errs.ErrBackendUnavailable) || young {
			t.Errorf("Young(%s): %v, %v; want ErrAccountAgeUnknown", uid, young, err)
		}
		if d := time.Since(start); d > accountLookupBudget+5*time.Second {
			t.Errorf("Young(%s) took %v, budget %v", uid, d, accountLookupBudget)
		}
	}
	if got, err := y.YoungAmong(ctx, []string{"old", "down"}); err == nil {
		t.Errorf("YoungAmong with one account unknown: %v, no error", got)
	}
	var off *YoungAccounts
	if young, err := off.Young(ctx, "new"); err != nil || young {
		t.Errorf("the rule off: %v, %v", young, err)
	}
}
