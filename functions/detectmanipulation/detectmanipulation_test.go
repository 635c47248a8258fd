package detectmanipulationfn_test

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	detectmanipulationfn "github.com/videngage/engagement/functions/detectmanipulation"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/moderationtest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

// seed writes the world's reactions as reaction rows.
func seed(t *testing.T, db *spannerdb.DB, w moderationtest.World) {
	t.Helper()
	for _, ms := range w.Mutations(500) {
		if _, err := db.Client.Apply(spannerdb.Uncounted(context.Background()), ms); err != nil {
			t.Fatal(err)
		}
	}
}

func run(t *testing.T, h http.Handler) detectmanipulationfn.Report {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/detect-manipulation", strings.NewReader("{}")))
	if rec.Code != http.StatusOK {
		t.Fatalf("run: %d %s", rec.Code, rec.Body)
	}
	var rep detectmanipulationfn.Report
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

func flagged(t *testing.T, rs *moderationstore.Store) map[string]moderation.Flag {
	t.Helper()
	out := map[string]moderation.Flag{}
	var cur *moderation.Cursor
	for {
		page, next, err := rs.ListFlagged(context.Background(), cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page {
			out[f.UserID] = f
		}
		if next == nil {
			return out
		}
		cur = next
	}
}

// A ring of 50 new accounts liking 4 new videos within 5 minutes, among
// 2,000 ordinary accounts, 20 heavy users, a viral video liked by 1,200 of
// them within 10 minutes and a channel's release liked by 40 established
// fans, over an hour: the ring, and only the ring, is flagged, with
// its evidence; the next run flags nothing again, and a moderator's unflag
// stands when the same evidence is read again.
func TestFlagsTheRingAndOnlyTheRing(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db := emulatortest.Spanner(t, cfg)
	now := time.Now().UTC()
	world := moderationtest.Population{
		Seed: 11, Ordinary: 2000, PerUser: 2, Catalogue: 10000, Heavy: 20, HeavyPerUser: 40, NewShare: 0.1,
		Viral: 1200, ViralSpread: 10 * time.Minute,
		Fans: 40, FanItems: 4, FanSpread: 15 * time.Minute,
		Rings: []moderationtest.Ring{{Size: 50, Items: 4, Spread: 5 * time.Minute}},
	}.Generate(now.Add(-30 * time.Minute))
	started := time.Now()
	seed(t, db, world)
	t.Logf("seeded %d reactions in %v", len(world.Reactions), time.Since(started))
	rs := moderationstore.New(db, moderationstore.Gate{})
	// Steps of an hour, and a row budget that makes the first split: the
	// run walks the two hours in several steps.
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{Store: detectmanipulationfn.Stores(reactionstore.New(db), rs), MaxRows: 5000,
		FirstLookback: 2 * time.Hour, Now: func() time.Time { return now }})

	before, started := otelcount.Global().Spanner(), time.Now()
	rep := run(t, h)
	cost := otelcount.Global().Spanner().Minus(before)
	t.Logf("run in %v: %d steps, %d reactions read, %d groups, %d flagged; Spanner: %d reads, %d commits, %d rows written",
		time.Since(started), rep.Steps, rep.Reactions, rep.Groups, rep.Flagged, cost.Reads, cost.Commits, cost.RowWrites)
	if rep.Steps < 3 || rep.Reactions < len(world.Reactions) || !rep.To.Equal(now.Add(-10*time.Second)) {
		t.Errorf("report %+v: want at least 3 steps over all %d reactions up to now-10s", rep, len(world.Reactions))
	}
	flags := flagged(t, rs)
	var got []string
	for u, f := range flags {
		got = append(got, u)
		if f.Reason != moderation.Automatic || f.Evidence == nil || f.Evidence.GroupSize != 50 || len(f.Evidence.Items) != 4 ||
			f.Evidence.WindowEnd.Sub(f.Evidence.WindowStart) > 5*time.Minute || f.Evidence.YoungAccounts != 50 {
			t.Errorf("flag %v: %s at %v, evidence %+v", u, f.Reason, f.FlaggedAt, f.Evidence)
		}
	}
	slices.Sort(got)
	var ring []string
	for u := range world.Ring {
		ring = append(ring, u)
	}
	slices.Sort(ring)
	if !slices.Equal(got, ring) {
		t.Fatalf("flagged %d accounts %v, want the ring's %d", len(got), got, len(ring))
	}
	if rep.Flagged != 50 || cost.Commits != int64(rep.Steps) {
		t.Errorf("report %+v with %d commits: want 50 flagged, one commit a step", rep, cost.Commits)
	}

	// The next run reads only what is new (nothing) and flags nobody twice.
	again := run(t, h)
	if again.Flagged != 0 || again.Steps != 0 || !again.From.Equal(rep.To) {
		t.Errorf("second run: %+v", again)
	}

	// A moderator clears one member; a run over the ring's minutes again
	// (its watermark set back before them) finds the group and does not
	// flag that member back.
	if _, err := rs.SetFlagged(ctx, moderation.Decision{Moderator: "mod", UserIDs: ring[:1], Flagged: false}); err != nil {
		t.Fatal(err)
	}
	back := flags[ring[1]].Evidence.WindowStart.Add(-time.Minute)
	if _, err := db.Client.Apply(ctx, []*spanner.Mutation{spanner.Update("JobWatermarks",
		[]string{"Name", "Watermark"}, []any{detectmanipulationfn.Job, back})}); err != nil {
		t.Fatal(err)
	}
	third := run(t, h)
	if third.Groups != 1 || third.Flagged != 0 {
		t.Errorf("rerun over the same evidence: %+v, want the group found and nobody flagged", third)
	}
	if f := flagged(t, rs); len(f) != 49 || f[ring[0]].UserID != "" {
		t.Errorf("after the moderator's unflag and a rerun: %d flagged, want 49", len(f))
	}
}

func TestRefusesABody(t *testing.T) {
	h := detectmanipulationfn.New(detectmanipulationfn.Deps{})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/internal/detect-manipulation", strings.NewReader(`{"step":"1h"}`)))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "INVALID_ARGUMENT") {
		t.Fatalf("unknown field: %d %s", rec.Code, rec.Body)
	}
}
