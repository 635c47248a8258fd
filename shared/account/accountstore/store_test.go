package accountstore

import (
	"context"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

func newStore(t *testing.T) (*Store, *spannerdb.DB) {
	t.Helper()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	return New(db), db
}

func erasing(t *testing.T, db *spannerdb.DB, users ...string) map[string]bool {
	t.Helper()
	var out map[string]bool
	var keys []spanner.Key
	for _, u := range users {
		keys = append(keys, spanner.Key{u})
	}
	_, err := db.InTx(context.Background(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) (err error) {
		out, err = Erasing(ctx, tx, keys)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestErasureRecord: a request opens one record (asking again leaves it as
// it is), a step of a phase the record has left changes nothing, the
// phases run in order to done, the sweep lists open records only, and a
// request after done starts a new erasure.
func TestErasureRecord(t *testing.T) {
	ctx := context.Background()
	s, db := newStore(t)
	e, err := s.Request(ctx, "ann")
	if err != nil || e.Phase != account.Reactions {
		t.Fatalf("request: %+v %v", e, err)
	}
	first, _, _ := s.Get(ctx, "ann")
	if again, err := s.Request(ctx, "ann"); err != nil || !again.RequestTime.Equal(first.RequestTime) || again.Phase != account.Reactions {
		t.Errorf("asking again: %+v %v, want the open record %+v", again, err, first)
	}
	if got := erasing(t, db, "ann", "bob"); !got["ann"] || got["bob"] {
		t.Errorf("Erasing: %v, want ann only", got)
	}

	if _, err := s.Step(ctx, "ann", account.Reactions, account.Figures{Reactions: 3, Steps: 1}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Step(ctx, "ann", account.Reactions, account.Figures{Steps: 1}, true); err != nil {
		t.Fatal(err)
	}
	// A duplicate worker's late step of the phase already left.
	e, err = s.Step(ctx, "ann", account.Reactions, account.Figures{Reactions: 3, Steps: 1}, true)
	if err != nil || e.Phase != account.Comments || e.Reactions != 3 || e.Steps != 2 {
		t.Errorf("a late step of a phase left: %+v %v, want comments with 3 reactions in 2 steps", e, err)
	}
	stalled, err := s.Stalled(ctx, time.Now().Add(time.Minute), 10)
	if err != nil || len(stalled) != 1 || stalled[0].UserID != "ann" {
		t.Errorf("stalled: %+v %v", stalled, err)
	}
	for p := account.Comments; p != account.Done; p = p.Next() {
		if e, err = s.Step(ctx, "ann", p, account.Figures{Steps: 1}, true); err != nil {
			t.Fatal(err)
		}
	}
	if e.Open() || e.Phase != account.Done {
		t.Fatalf("after the last phase: %+v", e)
	}
	if got := erasing(t, db, "ann"); got["ann"] {
		t.Error("a done erasure still refuses writes")
	}
	if stalled, _ := s.Stalled(ctx, time.Now().Add(time.Minute), 10); len(stalled) != 0 {
		t.Errorf("a done erasure is listed as stalled: %+v", stalled)
	}
	e, err = s.Request(ctx, "ann")
	if err != nil || !e.Open() || e.Phase != account.Reactions {
		t.Errorf("a request after done: %+v %v, want a new erasure", e, err)
	}
	if got, _, _ := s.Get(ctx, "ann"); got.Reactions != 0 || !got.Open() {
		t.Errorf("the new erasure kept the old figures or is closed: %+v", got)
	}
}
