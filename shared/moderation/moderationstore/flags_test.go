package moderationstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// flagWorld is a database of its own and the flags' store over it.
type flagWorld struct {
	db  *spannerdb.DB
	mod *moderationstore.Store
}

func newFlagWorld(t *testing.T) *flagWorld {
	t.Helper()
	db := newDB(t)
	return &flagWorld{db: db, mod: moderationstore.New(db, moderationstore.Gate{})}
}

func group(ev moderation.Evidence, members ...string) moderation.Group {
	return moderation.Group{Members: members, Evidence: ev}
}

func listFlags(t *testing.T, rs *moderationstore.Store, pageSize int) []moderation.Flag {
	t.Helper()
	var out []moderation.Flag
	var cur *moderation.Cursor
	for pages := 0; ; pages++ {
		page, next, err := rs.ListFlagged(context.Background(), cur, pageSize)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > pageSize || (next != nil && len(page) != pageSize) {
			t.Fatalf("page of %d with next %v, page size %d", len(page), next, pageSize)
		}
		out = append(out, page...)
		if next == nil {
			return out
		}
		if pages > 100 {
			t.Fatal("listing does not end")
		}
		cur = next
	}
}

func TestListFlaggedNewestFirstAcrossPages(t *testing.T) {
	w := newFlagWorld(t)
	ctx := context.Background()
	var want []string
	for i, batch := range [][]string{{"a", "b", "c"}, {"d"}, {"e", "f"}} {
		if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: batch, Flagged: true}); err != nil {
			t.Fatal(err)
		}
		// Newest first, user ids descending within one commit.
		b := slices.Clone(batch)
		slices.Reverse(b)
		want = append(b, want...)
		_ = i
	}
	// A row from before the Reason and FlaggedAt columns lists last, at its
	// update time, as a moderator's.
	if _, err := w.db.Client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate("FlaggedUsers",
		[]string{"UserId", "Flagged", "UpdateTime"}, []any{"legacy", true, spanner.CommitTimestamp})}); err != nil {
		t.Fatal(err)
	}
	want = append(want, "legacy")
	// Unflagged accounts are not listed.
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"gone"}, Flagged: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"gone"}, Flagged: false}); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1, 2, 3, 7, 100} {
		var got []string
		flags := listFlags(t, w.mod, size)
		for _, f := range flags {
			got = append(got, f.UserID)
			if f.Reason != moderation.ByModerator || f.Evidence != nil || f.FlaggedAt.IsZero() {
				t.Errorf("flag %+v", f)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("page size %d: %v, want %v", size, got, want)
		}
		for i := 1; i < len(flags)-1; i++ {
			if flags[i].FlaggedAt.After(flags[i-1].FlaggedAt) {
				t.Errorf("page size %d: not newest first at %d: %+v", size, i, flags)
			}
		}
	}
}

// trail lists the audit entries about user, newest first.
func trail(t *testing.T, w *flagWorld, user string) []moderation.Entry {
	t.Helper()
	es, next, err := moderationstore.New(w.db, moderationstore.Gate{}).List(context.Background(), moderation.Filter{UserID: user}, nil, 100)
	if err != nil || next != nil {
		t.Fatalf("trail of %s: %v %v", user, next, err)
	}
	return es
}

// TestFlagsAreOnTheRecord: a moderator's flag and unflag, and the detectors'
// flags, each write an audit entry with who, why and whether the state
// changed, in the transaction of the decision; a revoked moderator's
// decision is refused and changes nothing.
func TestFlagsAreOnTheRecord(t *testing.T) {
	w := newFlagWorld(t)
	ctx := context.Background()
	ev := moderation.Evidence{Items: []moderation.Item{{ContentID: "v", Reaction: "like"}}, GroupSize: 2,
		WindowStart: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), WindowEnd: time.Date(2026, 12, 1, 1, 5, 0, 0, time.UTC)}
	if n, err := w.mod.FlagGroups(ctx, []moderation.Group{group(ev, "bot1", "bot2")}, "detect", time.Time{}, ev.WindowEnd); err != nil || n != 2 {
		t.Fatalf("FlagGroups: %d %v", n, err)
	}
	views := moderation.Evidence{WindowStart: ev.WindowStart, WindowEnd: ev.WindowStart.Add(time.Hour), GroupSize: 1, Views: 900}
	if n, err := w.mod.FlagAccounts(ctx, []moderation.Group{group(views, "farmer")}); err != nil || n != 1 {
		t.Fatalf("FlagAccounts: %d %v", n, err)
	}
	if n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod-a", UserIDs: []string{"bot1", "bot2", "bot1"}, Flagged: false, Reason: "false positive"}); err != nil || n != 2 {
		t.Fatalf("unflag: %d %v", n, err)
	}
	if n, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod-b", UserIDs: []string{"bot2", "farmer"}, Flagged: true}); err != nil || n != 1 {
		t.Fatalf("flag: %d %v", n, err)
	}
	describe := func(es []moderation.Entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%s by %s (%s) %q changed=%v evidence=%v", e.Action, e.Actor, e.ActorKind, e.Reason, e.Changed, e.Evidence != nil))
		}
		return out
	}
	for user, want := range map[string][]string{
		"bot1": {
			`unflag by mod-a (moderator) "false positive" changed=true evidence=false`,
			fmt.Sprintf("flag by %s (automatic) %q changed=true evidence=true", moderation.DetectorGroups, ev.Summary()),
		},
		"bot2": {
			`flag by mod-b (moderator) "" changed=true evidence=false`,
			`unflag by mod-a (moderator) "false positive" changed=true evidence=false`,
			fmt.Sprintf("flag by %s (automatic) %q changed=true evidence=true", moderation.DetectorGroups, ev.Summary()),
		},
		"farmer": {
			`flag by mod-b (moderator) "" changed=false evidence=false`,
			fmt.Sprintf("flag by %s (automatic) %q changed=true evidence=true", moderation.DetectorViews, views.Summary()),
		},
	} {
		if got := describe(trail(t, w, user)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s's trail:\n%s\nwant\n%s", user, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	// Revoked: refused, nothing written.
	ms := moderationstore.New(w.db, moderationstore.Gate{})
	if _, err := ms.Revoke(ctx, "mod-b", "ops", "left the team"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod-b", UserIDs: []string{"bot1"}, Flagged: true}); !errors.Is(err, moderation.ErrRevoked) {
		t.Fatalf("a revoked moderator's flag: %v, want ErrRevoked", err)
	}
	if got := trail(t, w, "bot1"); len(got) != 2 {
		t.Errorf("the refused flag wrote an entry: %v", describe(got))
	}
	if flags := listFlags(t, w.mod, 10); len(flags) != 2 || flags[0].UserID != "farmer" && flags[1].UserID != "farmer" {
		t.Errorf("flags after the refused call: %+v", flags)
	}
	// Limited: the gate's limit holds for decisions too.
	limited := moderationstore.New(w.db, moderationstore.NewGate(1))
	if _, err := limited.SetFlagged(ctx, moderation.Decision{Moderator: "mod-c", UserIDs: []string{"x"}, Flagged: true}); err != nil {
		t.Fatal(err)
	}
	var rl *errs.RateLimitedError
	if _, err := limited.SetFlagged(ctx, moderation.Decision{Moderator: "mod-c", UserIDs: []string{"y"}, Flagged: true}); !errors.As(err, &rl) {
		t.Fatalf("second call at one a minute: %v, want a RateLimitedError", err)
	}
	if got := trail(t, w, "y"); len(got) != 0 {
		t.Errorf("the limited call wrote %v", describe(got))
	}
}

// TestUnflagProtectionExpires: a moderator's unflag keeps the detectors off
// the account for the store's protection, and not after it; a second unflag
// renews it.
func TestUnflagProtectionExpires(t *testing.T) {
	w := newFlagWorld(t)
	ctx := context.Background()
	const protection = 30 * 24 * time.Hour
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot"}, Flagged: false, Reason: "cleared"}); err != nil {
		t.Fatal(err)
	}
	unflagged := time.Now()
	views := func(n int64) []moderation.Group {
		return []moderation.Group{group(moderation.Evidence{WindowStart: unflagged, WindowEnd: unflagged.Add(time.Hour), GroupSize: 1, Views: n}, "bot")}
	}
	at := func(d time.Duration) *moderationstore.Store {
		// A minute of slack either way for the emulator's commit clock.
		return moderationstore.New(w.db, moderationstore.Gate{}).ProtectUnflags(protection).SetNow(func() time.Time { return unflagged.Add(d) })
	}
	if n, err := at(protection-time.Minute).FlagAccounts(ctx, views(1000)); err != nil || n != 0 {
		t.Fatalf("within the protection: flagged %d, %v; want none", n, err)
	}
	if n, err := at(protection+time.Minute).FlagAccounts(ctx, views(1001)); err != nil || n != 1 {
		t.Fatalf("after the protection: flagged %d, %v; want the account", n, err)
	}
	flags := listFlags(t, w.mod, 10)
	if len(flags) != 1 || flags[0].UserID != "bot" || flags[0].Reason != moderation.Automatic || flags[0].Evidence == nil || flags[0].Evidence.Views != 1001 {
		t.Fatalf("listing after the expiry: %+v", flags)
	}
	if es := trail(t, w, "bot"); len(es) != 2 || es[0].Action != moderation.ActionFlag || es[0].ActorKind != moderation.ActorAutomatic || es[1].Reason != "cleared" {
		t.Fatalf("trail: %+v", es)
	}
	// Unflagged again: protected again from this decision on.
	if _, err := w.mod.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: []string{"bot"}, Flagged: false}); err != nil {
		t.Fatal(err)
	}
	if n, err := at(protection-time.Minute).FlagAccounts(ctx, views(1002)); err != nil || n != 0 {
		t.Fatalf("after a second unflag: flagged %d, %v; want none", n, err)
	}
	// The job's path (FlagGroups) honours the same protection.
	if n, err := at(2*protection+time.Hour).FlagGroups(ctx, views(1003), "detect", time.Time{}, unflagged); err != nil || n != 1 {
		t.Fatalf("FlagGroups after the renewed protection: %d %v", n, err)
	}
}
