package moderationstore_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

func newDB(t *testing.T) *spannerdb.DB {
	t.Helper()
	return emulatortest.Spanner(t, emulatortest.New(t))
}

// record commits entries the way an action does: in a transaction that
// passes the gate first.
func record(t *testing.T, db *spannerdb.DB, g moderationstore.Gate, moderator string, es ...moderation.Entry) error {
	t.Helper()
	_, err := db.InTx(context.Background(), func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		ms, err := g.Admit(ctx, tx, moderator, time.Now())
		if err != nil {
			return err
		}
		return tx.BufferWrite(append(ms, moderationstore.Record(es...)...))
	})
	return err
}

func listAll(t *testing.T, s *moderationstore.Store, f moderation.Filter, size int) []moderation.Entry {
	t.Helper()
	var out []moderation.Entry
	var after *moderation.EntryCursor
	for pages := 0; ; pages++ {
		page, next, err := s.List(context.Background(), f, after, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > size || (next != nil && len(page) != size) || pages > 100 {
			t.Fatalf("page of %d with next %v, size %d", len(page), next, size)
		}
		out = append(out, page...)
		if next == nil {
			return out
		}
		after = next
	}
}

// TestTrailListsNewestFirstByFilter: entries written by several
// transactions list newest first across pages of any size, whole or by
// account or video, with every field as written and the commit time.
func TestTrailListsNewestFirstByFilter(t *testing.T) {
	db := newDB(t)
	s := moderationstore.New(db, moderationstore.Gate{})
	ev := moderation.Evidence{Items: []moderation.Item{{ContentID: "v9", Reaction: "like"}}, GroupSize: 5, YoungAccounts: 4,
		WindowStart: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), WindowEnd: time.Date(2026, 12, 1, 1, 5, 0, 0, time.UTC)}
	batches := [][]moderation.Entry{
		{{Action: moderation.ActionFlag, Actor: moderation.DetectorGroups, ActorKind: moderation.ActorAutomatic, UserID: "bot", Reason: ev.Summary(), Changed: true, Evidence: &ev}},
		{{Action: moderation.ActionUnflag, Actor: "mod", ActorKind: moderation.ActorModerator, UserID: "bot", Reason: "a real fan", Changed: true}},
		{
			{Action: moderation.ActionSpam, Actor: "mod", ActorKind: moderation.ActorModerator, UserID: "spammer", CommentID: "c1", VideoID: "v1", Changed: true},
			{Action: moderation.ActionSpam, Actor: "mod", ActorKind: moderation.ActorModerator, UserID: "spammer", CommentID: "c2", VideoID: "v2", Changed: false},
			{Action: moderation.ActionSpam, Actor: "mod", ActorKind: moderation.ActorModerator, UserID: "other", CommentID: "c3", VideoID: "v1", Changed: true},
		},
	}
	start := time.Now().Add(-time.Minute)
	for _, b := range batches {
		if err := record(t, db, moderationstore.Gate{}, "mod", b...); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []int{1, 2, 100} {
		all := listAll(t, s, moderation.Filter{}, size)
		if len(all) != 5 {
			t.Fatalf("size %d: %d entries, want 5", size, len(all))
		}
		for i := 1; i < len(all); i++ {
			if all[i].Time.After(all[i-1].Time) || all[i].Time.Equal(all[i-1].Time) && all[i].ID >= all[i-1].ID {
				t.Fatalf("size %d: entry %d out of order: %+v after %+v", size, i, all[i], all[i-1])
			}
		}
		last := all[4]
		if last.Action != moderation.ActionFlag || last.Actor != moderation.DetectorGroups || last.ActorKind != moderation.ActorAutomatic ||
			last.Evidence == nil || last.Evidence.GroupSize != 5 || last.Reason != ev.Summary() || !last.Time.After(start) || last.ID == "" {
			t.Errorf("the automatic flag reads back as %+v", last)
		}
		if u := all[3]; u.Action != moderation.ActionUnflag || u.Reason != "a real fan" || u.Evidence != nil || !u.Changed {
			t.Errorf("the unflag reads back as %+v", u)
		}
	}
	byUser := listAll(t, s, moderation.Filter{UserID: "spammer"}, 1)
	if len(byUser) != 2 || byUser[0].UserID != "spammer" || byUser[1].UserID != "spammer" {
		t.Errorf("spammer's entries: %+v", byUser)
	}
	byVideo := listAll(t, s, moderation.Filter{VideoID: "v1"}, 1)
	if len(byVideo) != 2 || byVideo[0].VideoID != "v1" || byVideo[1].VideoID != "v1" {
		t.Errorf("v1's entries: %+v", byVideo)
	}
	both := listAll(t, s, moderation.Filter{UserID: "spammer", VideoID: "v1"}, 10)
	if len(both) != 1 || both[0].CommentID != "c1" {
		t.Errorf("spammer's entries on v1: %+v", both)
	}
	if none := listAll(t, s, moderation.Filter{UserID: "nobody"}, 10); len(none) != 0 {
		t.Errorf("nobody's entries: %+v", none)
	}
}

// TestRevocationRefusesTheNextCall: a revoked moderator's next call is
// refused, in its own transaction, and its entries are not written; the
// revocation and the restoration are in the trail; a restored moderator
// acts again.
func TestRevocationRefusesTheNextCall(t *testing.T) {
	db := newDB(t)
	s := moderationstore.New(db, moderationstore.Gate{})
	ctx := context.Background()
	spam := moderation.Entry{Action: moderation.ActionSpam, Actor: "mallory", ActorKind: moderation.ActorModerator, UserID: "u", CommentID: "c", VideoID: "v", Changed: true}
	if err := record(t, db, moderationstore.Gate{}, "mallory", spam); err != nil {
		t.Fatalf("before the revocation: %v", err)
	}
	if err := s.Admit(ctx, "mallory"); err != nil {
		t.Fatalf("listing before the revocation: %v", err)
	}
	if changed, err := s.Revoke(ctx, "mallory", "ops@example.com", "token stolen"); err != nil || !changed {
		t.Fatalf("Revoke: %v %v", changed, err)
	}
	if changed, err := s.Revoke(ctx, "mallory", "ops@example.com", "again"); err != nil || changed {
		t.Fatalf("Revoke again: %v %v, want no change", changed, err)
	}
	if err := record(t, db, moderationstore.Gate{}, "mallory", spam); !errors.Is(err, moderation.ErrRevoked) {
		t.Fatalf("after the revocation: %v, want ErrRevoked", err)
	}
	if err := s.Admit(ctx, "mallory"); !errors.Is(err, moderation.ErrRevoked) {
		t.Fatalf("listing after the revocation: %v, want ErrRevoked", err)
	}
	if err := s.Admit(ctx, "trent"); err != nil {
		t.Fatalf("another moderator: %v", err)
	}
	if got := listAll(t, s, moderation.Filter{UserID: "u"}, 10); len(got) != 1 {
		t.Fatalf("the refused call wrote entries: %+v", got)
	}
	revs, err := s.Revocations(ctx)
	if err != nil || len(revs) != 1 || revs[0].UserID != "mallory" || revs[0].RevokedBy != "ops@example.com" || revs[0].Reason != "again" {
		t.Fatalf("Revocations: %+v %v", revs, err)
	}
	if changed, err := s.Restore(ctx, "mallory", "ops@example.com", "new token"); err != nil || !changed {
		t.Fatalf("Restore: %v %v", changed, err)
	}
	if err := record(t, db, moderationstore.Gate{}, "mallory", spam); err != nil {
		t.Fatalf("after the restoration: %v", err)
	}
	trail := listAll(t, s, moderation.Filter{UserID: "mallory"}, 10)
	var actions []string
	for _, e := range trail {
		actions = append(actions, fmt.Sprintf("%s:%s:%s:%v", e.Action, e.Actor, e.ActorKind, e.Changed))
	}
	want := []string{"restore:ops@example.com:operator:true", "revoke:ops@example.com:operator:false", "revoke:ops@example.com:operator:true"}
	if fmt.Sprint(actions) != fmt.Sprint(want) {
		t.Errorf("mallory's trail %v, want %v", actions, want)
	}
}

// TestGateLimitsEachModerator: a moderator's calls beyond the limit are
// refused with the time to wait, whatever the instance (the state is in
// Spanner); another moderator is not affected.
func TestGateLimitsEachModerator(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	const limit, burst = 6, 3 // 6 a minute: 3 at once, then one every 15 s
	a, b := moderationstore.New(db, moderationstore.NewGate(limit)), moderationstore.New(db, moderationstore.NewGate(limit))
	for i := range burst {
		s := a
		if i%2 == 1 {
			s = b // a second instance, the same limit
		}
		if err := s.Admit(ctx, "busy"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	err := a.Admit(ctx, "busy")
	var limited *errs.RateLimitedError
	if !errors.As(err, &limited) || limited.RetryAfter <= 0 || limited.RetryAfter > time.Minute {
		t.Fatalf("call %d: %v, want a RateLimitedError with a wait", burst, err)
	}
	if err := record(t, db, moderationstore.NewGate(limit), "busy"); !errors.As(err, &limited) {
		t.Fatalf("an action over the limit: %v, want a RateLimitedError", err)
	}
	if err := b.Admit(ctx, "calm"); err != nil {
		t.Fatalf("another moderator: %v", err)
	}
	// No limit: never refused.
	free := moderationstore.New(db, moderationstore.Gate{})
	for i := range 2 * limit {
		if err := free.Admit(ctx, "busy"); err != nil {
			t.Fatalf("unlimited call %d: %v", i, err)
		}
	}
}
