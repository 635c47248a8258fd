// Package erasurereplay asks again, after a restore, for every account
// erasure the erasure log holds from a time on (cmd/replayerasures): a
// restore of Spanner, Bigtable or Firestore brings back what the stores held
// at the restore point, erased users' data included, and the erasure log,
// kept in a bucket no restore touches, says whose. Each erasure is asked
// for as DELETE /v1/me asks for it (account.Starter, a new log entry
// included) and worked by EraseAccount; its steps are idempotent, so what
// the restored stores had already erased is not counted twice.
package erasurereplay

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// Needs are the clients a replay uses.
const Needs = host.NeedSpanner | host.NeedFirestore | host.NeedPubSub | host.NeedObjects

// Deps are what a replay reads and writes.
type Deps struct {
	Log     account.LogReader
	Starter account.Starter
	// Records are read while waiting for the erasures to finish.
	Records interface {
		Get(ctx context.Context, userID string) (account.Erasure, bool, error)
	}
}

// DepsFrom builds the replay's stores on clients built with Needs. stop
// stops the erasure topic's publisher.
func DepsFrom(c *host.Clients) (d Deps, stop func()) {
	records := accountstore.New(spannerdb.Wrap(c.Spanner, c.Config))
	pub := bus.NewPublisher(c.PubSub, c.Config.PubSub.ErasureTopic)
	log := accountstore.NewErasureLog(c.Objects.Bucket(c.Config.Erasure.LogBucket))
	return Deps{
		Log: log,
		Starter: account.Starter{
			Log:      log,
			Records:  records,
			Settings: historystore.NewSettings(c.Firestore),
			Next:     pub,
		},
		Records: records,
	}, pub.Stop
}

// Options of one run.
type Options struct {
	// Since: the erasures asked for at or after it are asked for again;
	// zero, every erasure in the log.
	Since time.Time
	// DryRun reads the log and says what would be asked for.
	DryRun bool
	// Wait, when positive, is how long to wait for every replayed erasure
	// to be done (EraseAccount works them; ResumeErasures re-drives one
	// whose message is lost).
	Wait time.Duration
	Out  io.Writer
}

// Run replays the log.
func Run(ctx context.Context, d Deps, o Options) (account.ReplayReport, error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	var users []string
	start := func(ctx context.Context, userID string) error {
		if err := d.Starter.Start(ctx, userID); err != nil {
			fmt.Fprintf(out, "erasure of %s not asked for again: %v\n", userID, err)
			return err
		}
		users = append(users, userID)
		return nil
	}
	rep, err := account.ReplayLog(ctx, d.Log, start, o.Since, o.DryRun)
	since := "the whole log"
	if !o.Since.IsZero() {
		since = "since " + o.Since.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(out, "erasure log %s: %d entries, %d users; %d erasures asked for again, %d failed (dry run: %v)\n",
		since, rep.Entries, rep.Users, rep.Started, len(rep.Failed), o.DryRun)
	if err != nil || o.Wait <= 0 || o.DryRun {
		return rep, err
	}
	return rep, wait(ctx, d, users, o.Wait, out)
}

// wait polls the users' erasure records until each is done.
func wait(ctx context.Context, d Deps, users []string, within time.Duration, out io.Writer) error {
	deadline := time.Now().Add(within)
	open := users
	for {
		var still []string
		for _, u := range open {
			e, ok, err := d.Records.Get(ctx, u)
			if err != nil {
				return err
			}
			if !ok || e.Open() {
				still = append(still, u)
			}
		}
		open = still
		if len(open) == 0 {
			fmt.Fprintf(out, "every replayed erasure is done (%d)\n", len(users))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d replayed erasures not done within %v (the first: %s); ResumeErasures goes on with them", len(open), len(users), within, open[0])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}
