package moderationstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
)

// TestMergeWritesTakeTheirTurn: against the emulator, which runs one
// read-write transaction at a time, the merge's writes (a share saved, a
// step's partials dropped) wait for a transaction of the process that is
// open, rather than dropping it or being dropped.
func TestMergeWritesTakeTheirTurn(t *testing.T) {
	db := newDB(t)
	if !db.Serial() {
		t.Fatal("the test's database is not the emulator's")
	}
	s := moderationstore.New(db, moderationstore.Gate{})
	ctx := context.Background()
	stepEnd := time.Now().UTC().Truncate(time.Minute)
	writes := []struct {
		name  string
		write func() error
	}{
		{"SaveMergeShare", func() error {
			return s.SaveMergeShare(ctx, stepEnd, 4, 2, 1, moderation.PairShare{Candidates: 7})
		}},
		{"DropPartials", func() error { return s.DropPartials(ctx, stepEnd, 4) }},
	}
	for _, w := range writes {
		name, write := w.name, w.write
		var runs atomic.Int32
		open, release := make(chan struct{}), make(chan struct{})
		held := make(chan error, 1)
		go func() {
			_, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
				if runs.Add(1) == 1 {
					if _, err := tx.ReadRow(ctx, "JobWatermarks", spanner.Key{"turn"}, []string{"Name"}); err != nil && spanner.ErrCode(err) != codes.NotFound {
						return err
					}
					close(open)
					<-release
				}
				return tx.BufferWrite([]*spanner.Mutation{spanner.InsertOrUpdate("JobWatermarks",
					[]string{"Name", "Watermark", "UpdateTime"}, []any{"turn", stepEnd, spanner.CommitTimestamp})})
			})
			held <- err
		}()
		<-open
		wrote := make(chan error, 1)
		go func() { wrote <- write() }()
		select {
		case err := <-wrote:
			close(release)
			t.Fatalf("%s answered (%v) while another transaction held the emulator", name, err)
		case <-time.After(time.Second):
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("%s: the open transaction: %v", name, err)
		}
		if err := <-wrote; err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := runs.Load(); n != 1 {
			t.Errorf("%s: the open transaction ran %d times, want once (not dropped)", name, n)
		}
	}
	got, err := s.MergeShares(ctx, stepEnd, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("shares after DropPartials: %v", got)
	}
}
