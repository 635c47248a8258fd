// Package reactionsfn is the Reactions function: the public reactions API.
//
//	PUT  /v1/reactions/{contentId}        set the caller's reaction (If-Match optional)
//	GET  /v1/reactions?ids=a,b            the caller's reactions on up to 50 items
//
// The moderation routes are the Moderation function's (functions/moderation).
package reactionsfn

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/session"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("Reactions", host.NeedSpanner|host.NeedBigtable|host.NeedPubSub|host.NeedVerifier,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			deps, err := Build(ctx, c)
			if err != nil {
				return nil, err
			}
			return New(deps), nil
		})
}

// Build wires the handler's collaborators from an instance's clients.
func Build(ctx context.Context, c *host.Clients) (Deps, error) {
	cfg := c.Config
	db := spannerdb.Wrap(c.Spanner, cfg)
	store := reactionstore.New(db)
	// A group's events are one message already: published at once.
	pub := bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic).Unbundled()
	w := reactionstore.NewWriter(store, pub, WriterOptions(db)).LimitWith(Limiter(c))
	d := Deps{Verifier: c.Verifier, Writer: w, Store: store, Metrics: c.Metrics}
	young, err := auth.YoungAccountsOf(ctx, cfg)
	if err != nil {
		return Deps{}, err
	}
	if young != nil {
		d.Young = young
		if limit := cfg.UserLimits().YoungReactions; limit > 0 {
			shared := ratelimit.NewBigtable(c.BigtableTx, "reactions-young", limit)
			d.YoungLimiter = ratelimit.NewDegrading(shared, "reactions-young", limit, cfg.HTTP.MaxInstances, cfg.HTTP.RateLimitBudget, c.Metrics)
		}
	}
	return d, nil
}

// Limiter is the per-user limit of reactions, nil when there is none: one
// Bigtable write and one read per group, the limiter history uses, so no
// Spanner row is read and written per reaction. While Bigtable does not
// answer, the instance decides it alone.
func Limiter(c *host.Clients) reactionstore.Limiter {
	cfg := c.Config
	limit := cfg.UserLimits().Reactions
	if limit <= 0 {
		return nil
	}
	shared := ratelimit.NewBigtable(c.BigtableTx, "reactions", limit)
	return ratelimit.NewDegrading(shared, "reactions", limit, cfg.HTTP.MaxInstances, cfg.HTTP.RateLimitBudget, c.Metrics)
}

// WriterOptions are the reactions' group commit over db: while a
// transaction runs, the requests that arrive form the next one; two
// transactions in flight (one against the emulator, which runs one at a
// time: outboxstore.WriterOptions), up to 500 requests each, and under
// load a wait for company that lasts while requests keep arriving (a
// millisecond at a time, at most 10), none when idle. A group's fixed cost (the
// limit's two Bigtable calls, the transaction's reads and commit, its
// message and the consumer's transaction) is then shared by the requests
// that would otherwise have formed the next group.
func WriterOptions(db *spannerdb.DB) batch.GroupCommitOptions {
	wo := outboxstore.WriterOptions(db, 2)
	wo.MaxBatch = 500
	wo.Gather, wo.MaxGather = time.Millisecond, 10*time.Millisecond
	return wo
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Writer interface {
		Set(ctx context.Context, r reactionstore.SetRequest) (reactionstore.SetResult, error)
	}
	Store interface {
		Get(ctx context.Context, userID string, ids []string) (map[string]reaction.State, error)
	}
	// Young says whether an account is young, failing closed
	// (auth.YoungAccounts).
	Young interface {
		Young(ctx context.Context, uid string) (bool, error)
	}
	// UserLimiter admits a user's write or says how long to wait.
	UserLimiter interface {
		Allow(ctx context.Context, userID string) (retryAfter time.Duration, err error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier Verifier
	Writer   Writer
	Store    Store
	// Young judges the young-account rule; nil: no account is young.
	Young Young
	// YoungLimiter limits a young account's reactions, besides the
	// writer's limit; nil: no limit of its own.
	YoungLimiter UserLimiter
	Metrics      *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// MaxIDs is the most ids one GET names.
const MaxIDs = 50

// New builds the Reactions handler.
func New(d Deps) http.Handler {
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("PUT /v1/reactions/{contentId}", h.put)
	rt.Handle("GET /v1/reactions", h.get)
	return rt
}

type putBody struct {
	Reaction *string `json:"reaction"`
}

// ReactionBody is the answer of PUT.
type ReactionBody struct {
	ContentID  string    `json:"contentId"`
	Reaction   string    `json:"reaction"`
	Version    int64     `json:"version"`
	UpdateTime time.Time `json:"updateTime"`
}

func (h *handler) put(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	id := r.PathValue("contentId")
	if err := httpx.ValidateID("contentId", id); err != nil {
		return err
	}
	ifMatch, err := parseIfMatch(r.Header.Values("If-Match"))
	if err != nil {
		return err
	}
	body, err := decodePut(w, r)
	if err != nil {
		return err
	}
	if body.Reaction == nil {
		return httpx.InvalidField(errs.MissingField, "reaction", `reaction is required: "like", "dislike" or "none"`)
	}
	to, err := reaction.Parse(*body.Reaction)
	if err != nil {
		return httpx.InvalidField(errs.InvalidValue, "reaction", "%s", err.Error())
	}
	if err := h.admitYoung(r.Context(), user.ID); err != nil {
		return err
	}
	res, err := h.Writer.Set(r.Context(), reactionstore.SetRequest{UserID: user.ID, ContentID: id, To: to, IfMatch: ifMatch})
	if err == nil {
		err = res.Err
	}
	var mismatch *reaction.ErrVersionMismatch
	var limited *errs.RateLimitedError
	switch {
	case errors.As(err, &mismatch):
		w.Header().Set("ETag", etag(mismatch.Current))
		return httpx.FailedPrecondition(errs.StaleVersion, "the reaction is at version %d, not the version in If-Match; read it and retry", mismatch.Current).
			With("currentVersion", strconv.FormatInt(mismatch.Current, 10))
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "reactions")
		return err
	case err != nil:
		return err
	}
	if res.Undone {
		h.Metrics.ReactionUndone(r.Context())
	}
	w.Header().Set("ETag", etag(res.State.Tag()))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(session.Header, session.Encode(res.CommitTime))
	writeReaction(w, ReactionBody{
		ContentID: id, Reaction: string(res.State.Current()), Version: res.State.Tag(), UpdateTime: res.UpdateTime.UTC(),
	})
	return nil
}

// admitYoung applies the young-account rule: a young account's reactions
// are limited to RATE_LIMIT_REACTIONS_YOUNG a minute (429 beyond), and
// when the account's age cannot be read the reaction is refused with 503
// and Retry-After (the rule fails closed). Nothing is written either way.
func (h *handler) admitYoung(ctx context.Context, uid string) error {
	if h.Young == nil {
		return nil
	}
	young, err := h.Young.Young(ctx, uid)
	if err != nil {
		slog.WarnContext(ctx, "account records unavailable: the reaction is refused", "error", err)
		return httpx.Unavailable(errs.BackendUnavailable, auth.AccountAgeRetryAfter, "the account's age cannot be checked right now; retry after the time in Retry-After")
	}
	if !young || h.YoungLimiter == nil {
		return nil
	}
	wait, err := h.YoungLimiter.Allow(ctx, uid)
	if err != nil {
		return err
	}
	if wait > 0 {
		h.Metrics.RateLimited(ctx, "reactions")
		return &errs.RateLimitedError{What: "reactions", RetryAfter: wait}
	}
	return nil
}

func etag(v int64) string { return `"` + strconv.FormatInt(v, 10) + `"` }

// parseIfMatch reads If-Match: one version, quoted ("3") or not; "*" and an
// absent header impose nothing.
func parseIfMatch(values []string) (*int64, error) {
	if len(values) == 0 {
		return nil, nil
	}
	if len(values) > 1 {
		return nil, httpx.InvalidField(errs.RepeatedParameter, "If-Match", `If-Match must be one version, such as "3"`)
	}
	v := strings.TrimSpace(values[0])
	if v == "*" {
		return nil, nil
	}
	v = strings.TrimPrefix(v, "W/")
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, httpx.InvalidField(errs.InvalidValue, "If-Match", `If-Match must be a version from an ETag, such as "3"`)
	}
	return &n, nil
}

// StateBody is one item of GET.
type StateBody struct {
	Reaction string `json:"reaction"`
	Version  int64  `json:"version"`
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	ids, err := httpx.ParseIDs(r.URL.Query().Get("ids"), MaxIDs)
	if err != nil {
		return err
	}
	states, err := h.Store.Get(r.Context(), user.ID, ids)
	if err != nil {
		return err
	}
	out := make(map[string]StateBody, len(states))
	for id, s := range states {
		out[id] = StateBody{Reaction: string(s.Current()), Version: s.Tag()}
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"reactions": out})
	return nil
}
