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
	bs, err := benchstack.New(ctx, "bench", cfg, srv, func(st *benchstack.Stack, mux *http.ServeMux) error {
		rdeps, err := reactionsfn.Build(st.Clients)
		if err != nil {
			return err
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
