package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/videngage/engagement/functions/applycounters"
	countsfn "github.com/videngage/engagement/functions/counts"
	reactionsfn "github.com/videngage/engagement/functions/reactions"
	"github.com/videngage/engagement/functions/reconcile"
	"github.com/videngage/engagement/functions/rollup"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/platform"
	"github.com/videngage/engagement/shared/spannerdb"
)

// server is a loopback HTTP server whose handler is set after start: the
// push endpoints must be known before the subscriptions are provisioned, and
// the handlers need the provisioned world.
type server struct {
	URL     string
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
}

func startServer() (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &server{URL: "http://" + l.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := s.handler.Load()
		if h == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(l)
	return s, nil
}

func (s *server) set(h http.Handler) { s.handler.Store(&h) }

func (s *server) close() { s.srv.Close() }

// pushEndpoint is where the subscriptions of an event function push.
func (s *server) pushEndpoint(function string) string { return s.URL + "/push/" + function }

// stack is the engagement functions of one world, served by one server the
// way the local stack serves them: the public API, the push endpoints of the
// event functions, and the rollup ticking in the background.
type stack struct {
	cfg      *config.Config
	clients  *platform.Clients
	issuer   *auth.LocalIssuer
	counters *counterstore.Store
	db       *spannerdb.DB
	rollup   http.Handler
	recon    http.Handler

	stopRollup context.CancelFunc
	rollupDone sync.WaitGroup
	pushes     atomic.Int64
}

// newStack builds the functions over cfg (whose Auth is pointed at a local
// issuer served by srv) and serves them on srv.
func newStack(ctx context.Context, cfg *config.Config, srv *server) (*stack, error) {
	issuer, err := auth.NewLocalIssuer(cfg.Project)
	if err != nil {
		return nil, err
	}
	cfg.Auth.Audience = cfg.Project
	cfg.Auth.Issuer = ""
	cfg.Auth.JWKSURL = srv.URL + "/jwks"
	clients, err := platform.New(ctx, cfg, platform.NeedSpanner|platform.NeedPubSub|platform.NeedVerifier)
	if err != nil {
		return nil, err
	}
	st := &stack{cfg: cfg, clients: clients, issuer: issuer}
	st.db = spannerdb.Wrap(clients.Spanner, cfg)
	rdeps, err := reactionsfn.Build(clients)
	if err != nil {
		clients.Close()
		return nil, err
	}
	st.counters, err = applycounters.Build(clients)
	if err != nil {
		clients.Close()
		return nil, err
	}
	apply := applycounters.New(st.counters, nil)
	reactions := reactionsfn.New(rdeps)
	counts := countsfn.New(countsfn.Deps{
		Verifier: clients.Verifier, Store: st.counters,
		MaxAge: cfg.HTTP.CountsMaxAge, MaxStaleness: cfg.Counters.CountsMaxStaleness,
	})
	st.rollup = rollup.New(rollup.Deps{
		Store: st.counters, Publisher: bus.NewPublisher(clients.PubSub, cfg.PubSub.CounterTopic),
		Interval: cfg.Counters.RollupInterval, RelayAfter: cfg.Counters.RelayAfter,
	})
	st.recon = reconcile.New(reconcile.Deps{Store: st.counters, Sources: reconcile.Sources()})

	mux := http.NewServeMux()
	mux.Handle("/jwks", issuer.JWKSHandler())
	mux.Handle("/v1/reactions", reactions)
	mux.Handle("/v1/reactions/", reactions)
	mux.Handle("/v1/moderation/flagged-users", reactions)
	mux.Handle("/v1/counts", counts)
	mux.Handle("/internal/rollup", st.rollup)
	mux.Handle("/internal/reconcile", st.recon)
	mux.Handle("/push/ApplyCounters", st.pushHandler(apply))
	mux.Handle("/push/ApplyHistory", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // not part of this stack
	}))
	srv.set(mux)

	rctx, cancel := context.WithCancel(context.Background())
	st.stopRollup = cancel
	st.rollupDone.Add(1)
	go st.tickRollup(rctx)
	return st, nil
}

// pushHandler turns a Pub/Sub push into the messagePublished CloudEvent the
// event function receives (what functions-framework does), one at a time.
func (st *stack) pushHandler(fn func(context.Context, event.Event) error) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		e := event.New()
		e.SetID(fmt.Sprintf("push-%d", st.pushes.Add(1)))
		e.SetType("google.cloud.pubsub.topic.v1.messagePublished")
		e.SetSource("//pubsub.googleapis.com/")
		if err := e.SetData("application/json", body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		err = fn(r.Context(), e)
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// tickRollup folds every ROLLUP_INTERVAL, as the Rollup function does inside
// each scheduled minute.
func (st *stack) tickRollup(ctx context.Context) {
	defer st.rollupDone.Done()
	t := time.NewTicker(st.cfg.Counters.RollupInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := st.counters.Fold(ctx); err != nil && ctx.Err() == nil {
				slog.Warn("bench: fold failed", "error", err.Error())
			}
		}
	}
}

func (st *stack) close() {
	st.stopRollup()
	st.rollupDone.Wait()
	st.clients.Close()
}

// token mints an ID token for uid.
func (st *stack) token(uid string, moderator bool) (string, error) {
	if moderator {
		return st.issuer.Mint(uid, auth.Moderator())
	}
	return st.issuer.Mint(uid)
}

// counted is the exact count of id: snapshot plus shards.
func (st *stack) counted(ctx context.Context, id string) (counter.Values, error) {
	c, _, err := st.counters.Totals(ctx, []string{id})
	if err != nil {
		return counter.Values{}, err
	}
	return c[id], nil
}
