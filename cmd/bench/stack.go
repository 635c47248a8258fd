package main

import (
	"context"
	"net/http"

	"github.com/videngage/engagement/internal/localauth"

	"github.com/videngage/engagement/cmd/internal/benchstack"
	moderationfn "github.com/videngage/engagement/functions/moderation"
	reactionsfn "github.com/videngage/engagement/functions/reactions"
	rollupfn "github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/leasestore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

// stack is the engagement functions of one world, served by one server the
// way the local stack serves them: the counter functions every benchmark
// serves (benchstack.Stack), the Reactions API with the moderators' flags
// (Moderation), and the Rollup function at
// /internal/rollup.
type stack struct {
	*benchstack.Stack
}

// newStack builds the functions over cfg (whose Auth is pointed at a local
// issuer served by srv) and serves them on srv, with whatever more mount
// adds.
func newStack(ctx context.Context, cfg *config.Config, srv *benchstack.Server, mount ...func(*benchstack.Stack, *http.ServeMux) error) (*stack, error) {
	return newStackWith(ctx, cfg, srv, writerDeployed, mount...)
}

// writerKind is the reactions' writer a stack serves.
type writerKind string

const (
	// writerDeployed is reactionsfn.Build's.
	writerDeployed writerKind = "deployed"
	// writerBaseline is the writer before the group commit waited for
	// company: no wait, at most 200 requests a transaction, and the
	// publisher's own bundling of messages (5 ms), the baseline of the
	// levels benchmark.
	writerBaseline writerKind = "baseline"
)

// baselineWriter is writerBaseline's writer over the stack's clients: the
// production store and limiter, the earlier options.
func baselineWriter(st *benchstack.Stack) reactionsfn.Writer {
	c := st.Clients
	db := spannerdb.Wrap(c.Spanner, c.Config)
	wo := outboxstore.WriterOptions(db, 2)
	wo.MaxBatch = 200
	return reactionstore.NewWriter(reactionstore.New(db), bus.NewPublisher(c.PubSub, c.Config.PubSub.CounterTopic), wo).
		LimitWith(reactionsfn.Limiter(c))
}

// newStackWith is newStack with the reactions' writer wk.
func newStackWith(ctx context.Context, cfg *config.Config, srv *benchstack.Server, wk writerKind, mount ...func(*benchstack.Stack, *http.ServeMux) error) (*stack, error) {
	bs, err := benchstack.New(ctx, "bench", cfg, srv, func(st *benchstack.Stack, mux *http.ServeMux) error {
		rdeps, err := reactionsfn.Build(ctx, st.Clients)
		if err != nil {
			return err
		}
		if wk == writerBaseline {
			rdeps.Writer = baselineWriter(st)
		}
		reactions := reactionsfn.New(rdeps)
		mux.Handle("/v1/reactions", reactions)
		mux.Handle("/v1/reactions/", reactions)
		mdeps, err := moderationfn.Build(st.Clients)
		if err != nil {
			return err
		}
		mux.Handle("/v1/moderation/flagged-users", moderationfn.New(mdeps))
		mux.Handle("/internal/rollup", rollupfn.New(rollupfn.Deps{
			Store: rollupfn.Stores(st.Folds, st.Outbox, leasestore.New(st.DB, nil)), Publisher: bus.NewPublisher(st.Clients.PubSub, cfg.PubSub.CounterTopic),
			Interval: cfg.Counters.RollupInterval, RelayAfter: cfg.Counters.RelayAfter,
		}))
		for _, m := range mount {
			if err := m(st, mux); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &stack{bs}, nil
}

// token mints an ID token for uid.
func (st *stack) token(uid string, moderator bool) (string, error) {
	if moderator {
		return st.Issuer.Mint(uid, localauth.Moderator())
	}
	return st.Issuer.Mint(uid)
}

// counted is the exact count of id: snapshot plus shards.
func (st *stack) counted(ctx context.Context, id string) (counter.Values, error) {
	c, _, err := st.Counts.Totals(ctx, []string{id})
	if err != nil {
		return counter.Values{}, err
	}
	return c[id], nil
}
