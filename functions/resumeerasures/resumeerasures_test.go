package resumeerasuresfn_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	resumeerasuresfn "github.com/videngage/engagement/functions/resumeerasures"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/errs"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// capture keeps the users of the erasure messages published, and fails
// while fail is set.
type capture struct {
	mu    sync.Mutex
	users []string
	fail  error
}

func (c *capture) Publish(_ context.Context, data []byte, attrs map[string]string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail != nil {
		return "", c.fail
	}
	m, err := account.DecodeMessage(data)
	if err != nil {
		return "", err
	}
	if attrs["kind"] != "account-erasure" {
		return "", errors.New("a message without kind account-erasure")
	}
	c.users = append(c.users, m.UserID)
	return m.UserID, nil
}

func (c *capture) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.users
	c.users = nil
	slices.Sort(out)
	return out
}

// newRecords returns a store holding an erasure open at Reactions (ann),
// one waiting at Settle (cid) and a done one (dan), all just moved.
func newRecords(t *testing.T) *accountstore.Store {
	t.Helper()
	ctx := context.Background()
	cfg := emulatortest.New(t)
	s := accountstore.New(emulatortest.Spanner(t, cfg))
	for _, u := range []string{"ann", "cid", "dan"} {
		if _, err := s.Request(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	advance := func(user string, to account.Phase) {
		t.Helper()
		for p := account.Reactions; p != to; p = p.Next() {
			if _, err := s.Step(ctx, user, p, account.Figures{Steps: 1}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	advance("cid", account.Settle)
	advance("dan", account.Done)
	return s
}

// run calls the job as Cloud Scheduler does at now and returns its status
// and report.
func run(t *testing.T, s resumeerasuresfn.Store, pub *capture, now time.Time) (int, resumeerasuresfn.Report) {
	t.Helper()
	h := resumeerasuresfn.New(resumeerasuresfn.Deps{
		Store: s, Publisher: pub,
		StalledAfter: time.Minute, Settle: 10 * time.Minute,
		Now: func() time.Time { return now },
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/resume-erasures", nil))
	var rep resumeerasuresfn.Report
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("report %q: %v", rec.Body, err)
		}
	}
	return rec.Code, rep
}

// TestResumeErasures: an open erasure is sent on once it has not moved for
// StalledAfter, one waiting at Settle only once its wait is over, a done
// one never; a failed publish fails the run.
func TestResumeErasures(t *testing.T) {
	s := newRecords(t)
	pub := &capture{}
	now := time.Now()

	if code, rep := run(t, s, pub, now); code != http.StatusOK || rep != (resumeerasuresfn.Report{}) {
		t.Errorf("just moved: %d %+v, want nothing stalled", code, rep)
	}
	if got := pub.take(); len(got) != 0 {
		t.Errorf("just moved: sent %q", got)
	}

	code, rep := run(t, s, pub, now.Add(2*time.Minute))
	if code != http.StatusOK || rep != (resumeerasuresfn.Report{Stalled: 2, Resumed: 1}) {
		t.Errorf("stalled, cid still settling: %d %+v, want 2 stalled, 1 resumed", code, rep)
	}
	if got := pub.take(); !slices.Equal(got, []string{"ann"}) {
		t.Errorf("stalled, cid still settling: sent %q, want ann", got)
	}

	code, rep = run(t, s, pub, now.Add(11*time.Minute))
	if code != http.StatusOK || rep != (resumeerasuresfn.Report{Stalled: 2, Resumed: 2}) {
		t.Errorf("settled: %d %+v, want 2 stalled, 2 resumed", code, rep)
	}
	if got := pub.take(); !slices.Equal(got, []string{"ann", "cid"}) {
		t.Errorf("settled: sent %q, want ann and cid", got)
	}

	pub.fail = errs.Unavailable("publish", errors.New("pubsub down"))
	if code, _ := run(t, s, pub, now.Add(11*time.Minute)); code != http.StatusServiceUnavailable {
		t.Errorf("publisher down: %d, want 503", code)
	}
}
