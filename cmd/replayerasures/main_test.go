package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/objects"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// TestRealMain: the command reads the environment the functions read and
// replays that world's erasure log from the restore point on: a dry run
// reports the entries and users and asks for nothing; the replay opens
// each user's erasure once and logs it again.
func TestRealMain(t *testing.T) {
	cfg := emulatortest.New(t)
	for k, v := range map[string]string{
		"GOOGLE_CLOUD_PROJECT": cfg.Project, "SPANNER_INSTANCE": cfg.Spanner.Instance, "SPANNER_DATABASE": cfg.Spanner.Database,
		"ERASURE_LOG_BUCKET": cfg.Erasure.LogBucket, "ERASURE_TOPIC": cfg.PubSub.ErasureTopic,
	} {
		t.Setenv(k, v)
	}
	ctx := context.Background()
	c, err := objects.New(ctx, cfg.Objects)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	log := accountstore.NewErasureLog(c.Bucket(cfg.Erasure.LogBucket))
	now := time.Now()
	for _, e := range []struct {
		user string
		ago  time.Duration
	}{{"ann", 2 * time.Hour}, {"bob", time.Hour}, {"ann", 30 * time.Minute}} {
		if err := log.Append(ctx, e.user, now.Add(-e.ago)); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-restored-to", now.Add(-90 * time.Minute).Format(time.RFC3339Nano), "-open-for", "0s"}
	records := accountstore.New(emulatortest.Spanner(t, cfg))

	var out strings.Builder
	if err := realMain(ctx, append(args, "-dry-run"), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), ": 2 entries, 2 users; 0 erasures asked for again") {
		t.Errorf("dry run said %q", out.String())
	}
	if _, ok, err := records.Get(ctx, "ann"); err != nil || ok {
		t.Fatalf("the dry run opened an erasure (%v, %v)", ok, err)
	}

	out.Reset()
	if err := realMain(ctx, args, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), ": 2 entries, 2 users; 2 erasures asked for again, 0 failed") {
		t.Errorf("replay said %q", out.String())
	}
	for _, u := range []string{"ann", "bob"} {
		if e, ok, err := records.Get(ctx, u); err != nil || !ok || !e.Open() {
			t.Errorf("%s: erasure %+v, %v, %v after the replay", u, e, ok, err)
		}
	}
	if all, err := log.Since(ctx, time.Time{}); err != nil || len(all) != 5 {
		t.Errorf("the log holds %d entries (%v), want the 3 and one per replayed user", len(all), err)
	}
}

func TestParse(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		args  []string
		since time.Time
		dry   bool
		wait  time.Duration
		bad   bool
	}{
		{args: []string{"-restored-to", "2026-12-03T10:00:00Z"}, since: at.Add(-24 * time.Hour)},
		{args: []string{"-restored-to", "2026-12-03T11:00:00+01:00", "-open-for", "2h", "-dry-run"}, since: at.Add(-2 * time.Hour), dry: true},
		{args: []string{"-all", "-wait", "30m"}, wait: 30 * time.Minute},
		{args: nil, bad: true},
		{args: []string{"-all", "-restored-to", "2026-12-03T10:00:00Z"}, bad: true},
		{args: []string{"-restored-to", "yesterday"}, bad: true},
		{args: []string{"-all", "extra"}, bad: true},
		{args: []string{"-all", "-wait", "-1s"}, bad: true},
	} {
		o, err := parse(tt.args)
		if tt.bad {
			if err == nil {
				t.Errorf("%q: accepted as %+v", tt.args, o)
			}
			continue
		}
		if err != nil || !o.Since.Equal(tt.since) || o.DryRun != tt.dry || o.Wait != tt.wait {
			t.Errorf("%q: %+v, %v; want since %v, dry run %v, wait %v", tt.args, o, err, tt.since, tt.dry, tt.wait)
		}
	}
}
