// Package applyhistoryfn is the ApplyHistory event function: it writes the
// Bigtable rows of each recorded watch published on the history topic (a
// batch of watches a message).
package applyhistoryfn

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterPush("ApplyHistory", host.NeedBigtable,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			return New(historystore.New(c.Bigtable), c.Metrics), nil
		})
}

// Store applies a watch idempotently.
type Store interface {
	Apply(ctx context.Context, w history.Watch) error
}

// New returns the event function's push handler (host.Push). It asks for a
// redelivery only when a write failed; a message that can never be applied
// is logged and refused too, so that Pub/Sub dead-letters it after the
// configured attempts instead of losing it (other messages are not held up
// behind it). m may be nil.
func New(store Store, m *telemetry.Metrics) http.Handler {
	return host.Push(name, m, func(ctx context.Context, msg bus.Message) error {
		b, err := history.DecodeBatch(msg.Data)
		if err != nil {
			return fmt.Errorf("%w: %w", bus.ErrPoison, err)
		}
		if err := applyAll(ctx, store, b.Watches); err != nil {
			return fmt.Errorf("applyhistory: batch %s: %w", b.ID, err)
		}
		m.EventsApplied(ctx, name, len(b.Watches))
		return nil
	})
}

// applyConcurrency bounds the watches of a batch applied at once. Applying
// watches concurrently, even two of one video, is safe: Apply converges
// whatever the order (see historystore.Store).
const applyConcurrency = 8

// applyAll applies every watch of a batch; a failure fails the batch, whose
// redelivery applies every watch again (each idempotently).
func applyAll(ctx context.Context, store Store, ws []history.Watch) error {
	errs := make([]error, len(ws))
	var g errgroup.Group
	g.SetLimit(applyConcurrency)
	for i, w := range ws {
		g.Go(func() error {
			if err := store.Apply(ctx, w); err != nil {
				errs[i] = fmt.Errorf("%s: %w", w.EventID, err)
			}
			return nil
		})
	}
	g.Wait()
	return errors.Join(errs...)
}

const name = "ApplyHistory"
