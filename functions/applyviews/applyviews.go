// Package applyviewsfn is the ApplyViews event function: it counts the views
// and unique viewers of the watches published on the history topic, a batch
// (one message) at a time.
//
// Each watch of the batch is claimed for the batch in Bigtable (the watch's
// watch_latest row records the first batch that carried it), then the
// counter events of the watches the batch owns, under ids derived from the
// batch id, are staged in the batch's own Bigtable row (viewstore), which
// the rollup's views fold counts with many other batches in one Spanner
// transaction. So:
//   - a redelivery, re-publish or replay of the batch owns the same watches
//     and stages the same events, which the counter store
//     refuses a second time (idempotence per batch, not per view);
//   - a crash after the claims and before the stage leaves the
//     claims to the batch's redelivery, which stages them;
//   - a client's retry of the same watch, or any other watch of the video by
//     the user received in the same viewing window (VIEW_WINDOW), finds the
//     view claimed and does not count it; a watch dated more than a window
//     before its receipt is history but never a view.
//
// Only some accounts' watches count: not those of a flagged account (by a
// moderator, the detection or the view velocity), nor those of a young one
// (auth.YoungAccounts: created less than COMMENT_YOUNG_ACCOUNT_AGE ago, or
// whose age cannot be read now, in which case the batch waits for its
// redelivery). Their watches are history, never views, and claim nothing.
// The views each account is counted per clock hour are tallied, and an
// account counted more than a person can watch (MAX_VIEWS_PER_HOUR) is
// flagged automatically (moderation.ViewVelocity) before the batch's views
// are staged: the batch that crosses the limit counts none of its views.
package applyviewsfn

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
	"github.com/videngage/engagement/shared/views/claimstore"
	"github.com/videngage/engagement/shared/views/viewstore"
)

func init() {
	host.RegisterPush("ApplyViews", host.NeedSpanner|host.NeedBigtable,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			claims := claimstore.NewClaims(c.BigtableTx, c.Config.History.ViewWindow)
			viewers := history.NewViewerHasher(c.Config.History.ViewerHashKey)
			flags := moderationstore.New(spannerdb.Wrap(c.Spanner, c.Config), moderationstore.Gate{}).ProtectUnflags(c.Config.Moderation.UnflagProtection)
			young, err := auth.YoungAccountsOf(ctx, c.Config)
			if err != nil {
				return nil, err
			}
			who := Eligibility{Flags: flags}
			if young != nil {
				who.Young = young
			}
			var velocity *VelocityCheck
			if n := c.Config.History.MaxViewsPerHour; n > 0 {
				velocity = &VelocityCheck{
					Counter: historystore.NewVelocity(c.BigtableTx),
					Flagger: flags,
					Params:  moderation.ViewVelocity{MaxPerHour: int64(n)},
				}
			}
			return New(claims, viewstore.NewStaging(c.BigtableTx), viewers, who, velocity, c.Metrics), nil
		}, (*config.Config).CheckViewerHashKey)
}

// Interfaces of what the function uses.
type (
	// Claims records which batch counts each view.
	Claims interface {
		Claim(ctx context.Context, batchID string, ws []history.Watch) (claimstore.Claimed, error)
	}
	// VelocityCounter tallies the views each account is counted per hour.
	VelocityCounter interface {
		Add(ctx context.Context, fresh []history.Watch) ([]historystore.HourViews, error)
	}
	// Flagger flags accounts automatically.
	Flagger interface {
		FlagAccounts(ctx context.Context, groups []moderation.Group) (int, error)
	}
	// Views takes the view events of the watches a batch owns, staged for
	// the rollup's fold (viewstore.Staging).
	Views interface {
		Put(ctx context.Context, batchID string, evs []events.Event) error
	}
	// Flags says which accounts are flagged now
	// (moderationstore.Store).
	Flags interface {
		FlaggedAmong(ctx context.Context, users []string) (map[string]bool, error)
	}
	// Young says which accounts are young now, failing closed
	// (auth.YoungAccounts).
	Young interface {
		YoungAmong(ctx context.Context, users []string) (map[string]bool, error)
	}
)

// Eligibility decides whose watches may count views: not a flagged
// account's, nor a young one's. A nil field excludes no one.
type Eligibility struct {
	Flags Flags
	Young Young
}

// excluded returns the users of ws whose watches count no view now.
func (e Eligibility) excluded(ctx context.Context, ws []history.Watch) (map[string]bool, error) {
	seen := map[string]bool{}
	var users []string
	for _, w := range ws {
		if !seen[w.UserID] {
			seen[w.UserID] = true
			users = append(users, w.UserID)
		}
	}
	out := map[string]bool{}
	if e.Flags != nil {
		flagged, err := e.Flags.FlaggedAmong(ctx, users)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, flagged)
	}
	if e.Young != nil {
		young, err := e.Young.YoungAmong(ctx, users)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, young)
	}
	return out, nil
}

// without returns ws less the watches of the users in out.
func without(ws []history.Watch, out map[string]bool) []history.Watch {
	if len(out) == 0 {
		return ws
	}
	var kept []history.Watch
	for _, w := range ws {
		if !out[w.UserID] {
			kept = append(kept, w)
		}
	}
	return kept
}

// VelocityCheck flags the accounts counted views faster than a person can
// watch.
type VelocityCheck struct {
	Counter VelocityCounter
	Flagger Flagger
	Params  moderation.ViewVelocity
}

// check tallies the batch's fresh views and flags the accounts over the
// limit, and returns those it judged over it. An account over it is
// flagged again by each batch that counts it a view within the hour
// (flagging again changes nothing), so a failed flag is made good by its
// next view.
func (v *VelocityCheck) check(ctx context.Context, fresh []history.Watch) ([]string, error) {
	if v == nil || len(fresh) == 0 {
		return nil, nil
	}
	hours, err := v.Counter.Add(ctx, fresh)
	if err != nil {
		return nil, err
	}
	counts := make([]moderation.AccountViews, len(hours))
	for i, h := range hours {
		counts[i] = moderation.AccountViews{UserID: h.UserID, Hour: h.Hour, Views: h.Views}
	}
	groups := v.Params.Judge(counts)
	if len(groups) == 0 {
		return nil, nil
	}
	n, err := v.Flagger.FlagAccounts(ctx, groups)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		slog.InfoContext(ctx, "applyviews: accounts flagged for their view velocity", "flagged", n, "maxPerHour", v.Params.MaxPerHour)
	}
	var over []string
	for _, g := range groups {
		over = append(over, g.Members...)
	}
	return over, nil
}

const name = "ApplyViews"

// New returns the event function's push handler (host.Push). It asks for a
// redelivery when Bigtable, Spanner or the account records failed: Pub/Sub
// redelivers the batch, which owns the same watches, also when that
// delivery overlaps another one (each claim is one atomic row mutation). A
// message that can never be applied is refused as poison, so that Pub/Sub
// dead-letters it. viewers hashes the unique viewers; who excludes the
// watches of flagged and young accounts; velocity and m may be nil.
func New(claims Claims, views Views, viewers history.ViewerHasher, who Eligibility, velocity *VelocityCheck, m *telemetry.Metrics) http.Handler {
	return host.Push(name, m, func(ctx context.Context, msg bus.Message) error {
		b, err := history.DecodeBatch(msg.Data)
		if err != nil {
			return fmt.Errorf("%w: %w", bus.ErrPoison, err)
		}
		m.BatchSize(ctx, name, len(b.Watches))
		out, err := who.excluded(ctx, b.Watches)
		if err != nil {
			return fmt.Errorf("applyviews: batch %s: accounts: %w", b.ID, err)
		}
		claimed, err := claims.Claim(ctx, b.ID, without(b.Watches, out))
		if err != nil {
			return fmt.Errorf("applyviews: batch %s: %w", b.ID, err)
		}
		over, err := velocity.check(ctx, claimed.Fresh)
		if err != nil {
			// Nothing is staged; the redelivery owns the same views (not
			// fresh again) and judges the velocity on the account's next
			// view.
			return fmt.Errorf("applyviews: batch %s: view velocity: %w", b.ID, err)
		}
		if len(over) > 0 && who.Flags != nil {
			// Those the check flagged (not those a moderator's unflag
			// protects) count none of the batch's views, nor on any
			// redelivery, which finds them flagged first.
			flagged, err := who.Flags.FlaggedAmong(ctx, over)
			if err != nil {
				return fmt.Errorf("applyviews: batch %s: %w", b.ID, err)
			}
			claimed.Owned = without(claimed.Owned, flagged)
		}
		evs := ViewEvents(viewers, b.ID, claimed.Owned)
		if len(evs) > 0 {
			if err := views.Put(ctx, b.ID, evs); err != nil {
				slog.WarnContext(ctx, "applyviews: count failed; Pub/Sub will redeliver", "messageId", msg.ID, "batchId", b.ID, "error", err.Error())
				return fmt.Errorf("applyviews: batch %s: %w", b.ID, err)
			}
		}
		slog.DebugContext(ctx, "applyviews: counted", "messageId", msg.ID, "batchId", b.ID,
			"watches", len(b.Watches), "excluded", len(out), "owned", len(claimed.Owned), "events", len(evs))
		return nil
	})
}

// ViewEvents are the counter events of the watches a batch owns: per video,
// one view a watch and its viewers' hashes, in events of at most
// events.MaxDeltas videos, whose ids derive from the batch id and the
// event's place among the batch's videos (sorted): the same on every
// delivery of the batch (and the same hashes, under the same key).
func ViewEvents(hasher history.ViewerHasher, batchID string, owned []history.Watch) []events.Event {
	views := map[string]int64{}
	viewers := map[string][]uint64{}
	seen := map[string]bool{}
	var first time.Time
	for _, w := range owned {
		views[w.VideoID]++
		if k := w.VideoID + "\x00" + w.UserID; !seen[k] {
			seen[k] = true
			viewers[w.VideoID] = append(viewers[w.VideoID], hasher.Hash(w.UserID))
		}
		if at := w.AcceptedAt(); first.IsZero() || at.Before(first) {
			first = at
		}
	}
	videos := make([]string, 0, len(views))
	for v := range views {
		videos = append(videos, v)
	}
	slices.Sort(videos)
	var out []events.Event
	for i := 0; len(videos) > 0; i++ {
		n := min(len(videos), events.MaxDeltas)
		e := events.Event{
			ID:      events.ID("views", batchID, strconv.Itoa(i)),
			Kind:    events.KindCounterDelta,
			Time:    first,
			Viewers: map[string][]uint64{},
		}
		for _, v := range videos[:n] {
			e.Deltas = append(e.Deltas, counter.Delta{Key: v, Field: counter.Views, N: views[v]})
			e.Viewers[v] = viewers[v]
		}
		out = append(out, e)
		videos = videos[n:]
	}
	return out
}
