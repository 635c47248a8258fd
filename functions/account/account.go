// Package accountfn is the Account function: the caller's own data.
//
//	GET    /v1/me/export   everything held about the caller as one JSON document: streamed,
//	                       or for a large account prepared in the exports bucket
//	                       (PrepareExport does the work) and handed over by a signed URL
//	DELETE /v1/me          erase the caller's account (202; EraseAccount does the work)
//
// It is a function of its own, not part of Counts (which serves
// /v1/me/counts): an export reads all three stores (Spanner, Bigtable,
// Firestore) for as long as a large account takes, where Counts is a
// Spanner-only read answered in milliseconds and scaled for the counts
// traffic. Its routes are exact paths, so /v1/me/counts stays with Counts.
package accountfn

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/objects"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	host.RegisterHTTP("Account", host.NeedSpanner|host.NeedBigtable|host.NeedFirestore|host.NeedPubSub|host.NeedVerifier|host.NeedObjects,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			db := spannerdb.Wrap(c.Spanner, c.Config)
			return New(Deps{
				Verifier:   c.Verifier,
				Reactions:  reactionstore.New(db),
				Comments:   commentstore.New(db, 0),
				History:    historystore.New(c.Bigtable),
				Settings:   historystore.NewSettings(c.Firestore),
				Erasures:   accountstore.New(db),
				ErasureLog: accountstore.NewErasureLog(c.Objects.Bucket(c.Config.Erasure.LogBucket)),
				Exports:    accountstore.NewExports(c.Firestore, c.Config.UserLimits().ExportsPerDay),
				// The export only reads the trail: no gate.
				Moderation:   moderationstore.New(db, moderationstore.Gate{}),
				Publisher:    bus.NewPublisher(c.PubSub, c.Config.PubSub.ErasureTopic),
				Prepared:     c.Objects.Bucket(c.Config.Objects.ExportsBucket),
				ExportTopic:  bus.NewPublisher(c.PubSub, c.Config.PubSub.ExportTopic),
				AsyncAbove:   c.Config.Export.AsyncAbove,
				EraseLimiter: eraseLimiter(c),
			}), nil
		})
}

// eraseLimiter is the per-user limit of erasure requests
// (RATE_LIMIT_OTHER_WRITES), counted in Bigtable as the other writes'
// limits are; nil when the limits are off.
func eraseLimiter(c *host.Clients) Limiter {
	limit := c.Config.UserLimits().OtherWrites
	if limit == 0 {
		return nil
	}
	shared := ratelimit.NewBigtable(c.BigtableTx, "account-erase", limit)
	return ratelimit.NewDegrading(shared, "account-erase", limit, c.Config.HTTP.MaxInstances, c.Config.HTTP.RateLimitBudget, c.Metrics)
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Settings interface {
		account.ExportSettings
		MarkErasing(ctx context.Context, userID string) error
	}
	Erasures interface {
		Request(ctx context.Context, userID string) (account.Erasure, error)
		Get(ctx context.Context, userID string) (e account.Erasure, ok bool, err error)
	}
	// Limiter admits a user's write or says how long to wait.
	Limiter interface {
		Allow(ctx context.Context, userID string) (retryAfter time.Duration, err error)
	}
	// ErasureLog appends to the erasure log (accountstore.ErasureLog).
	ErasureLog interface {
		Append(ctx context.Context, userID string, at time.Time) error
	}
	// Exports admits a user's exports (*accountstore.Exports): Begin
	// refuses with *errs.RateLimitedError while another runs or past the
	// day's limit.
	Exports interface {
		Begin(ctx context.Context, userID string, timeout time.Duration) (lease string, err error)
		End(ctx context.Context, userID, lease string) error
	}
	Publisher interface {
		Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier   Verifier
	Reactions  account.ExportReactions
	Comments   account.ExportComments
	History    account.ExportHistory
	Settings   Settings
	Moderation account.ExportModeration
	Erasures   Erasures
	ErasureLog ErasureLog
	Exports    Exports
	Publisher  Publisher // the erasure topic
	// Prepared is the bucket of the exports prepared by PrepareExport; nil
	// streams every export.
	Prepared *objects.Bucket
	// ExportTopic carries the exports to prepare to PrepareExport; needed
	// with Prepared.
	ExportTopic Publisher
	// AsyncAbove is the bound over which an export is prepared by
	// PrepareExport (EXPORT_ASYNC_ABOVE; ≤ 0: 1000): more reactions and
	// history entries in the first pages it reads before answering.
	AsyncAbove int
	// EraseLimiter limits each user's erasure requests that write; nil: no
	// limit.
	EraseLimiter Limiter
	// ExportTimeout bounds one export (default 10 minutes): it outlives the
	// request deadline of the other routes, since a large account streams
	// for longer than one backend call.
	ExportTimeout time.Duration
}

type handler struct{ Deps }

// New builds the Account handler.
func New(d Deps) http.Handler {
	if d.ExportTimeout <= 0 {
		d.ExportTimeout = 10 * time.Minute
	}
	if d.AsyncAbove <= 0 {
		d.AsyncAbove = 1000
	}
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("GET /v1/me/export", h.export)
	rt.Handle("DELETE /v1/me", h.erase)
	return rt
}

// erase asks for the caller's erasure (account.Starter: the entry in the
// erasure log, which no restore rolls back, first, then the record, the
// settings' mark and the message) and answers 202. Each write is
// idempotent, so a client that gets a 503 retries the whole call.
//
// A repeat while the erasure is pending — its record open and the settings
// marked, so every write of the first call's start committed (the log's
// entry comes before the record) — answers as the first did and writes
// nothing: no second erasure-log object, which could not be deleted for the
// log's retention, and no Spanner, Firestore or Pub/Sub work (ResumeErasures
// sends on an erasure whose message was lost). A call that would write is
// limited per user as every other write is (RATE_LIMIT_OTHER_WRITES).
func (h *handler) erase(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	pending, err := h.erasurePending(r.Context(), user.ID)
	if err != nil {
		return err
	}
	if pending {
		writeErasing(w)
		return nil
	}
	if l := h.EraseLimiter; l != nil {
		wait, err := l.Allow(r.Context(), user.ID)
		if err != nil {
			return err
		}
		if wait > 0 {
			return &errs.RateLimitedError{What: "account erasure requests", RetryAfter: wait}
		}
	}
	start := account.Starter{Log: h.ErasureLog, Records: h.Erasures, Settings: h.Settings, Next: h.Publisher}
	if err := start.Start(r.Context(), user.ID); err != nil {
		return err
	}
	if err := h.deletePrepared(r.Context(), user.ID); err != nil {
		return err
	}
	writeErasing(w)
	return nil
}

// erasurePending reports whether the user's erasure was started whole and
// is still under way: its record open and its history settings marked.
func (h *handler) erasurePending(ctx context.Context, userID string) (bool, error) {
	rec, ok, err := h.Erasures.Get(ctx, userID)
	if err != nil || !ok || !rec.Open() {
		return false, err
	}
	s, err := h.Settings.Get(ctx, userID)
	if err != nil {
		return false, err
	}
	return s.Erasing, nil
}

// writeErasing is the answer of an erasure asked for.
func writeErasing(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusAccepted, map[string]bool{"erasing": true})
}

// export streams the caller's export (account.Exporter), or for a large
// account has PrepareExport prepare it. The first pages are read before the
// answer starts, so that a backend down at the start is a 503; a failure
// after the first byte can no longer change the status, so the connection
// is aborted and the client sees a truncated document (an unterminated
// chunked body), never a complete-looking partial one.
func (h *handler) export(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	if h.Prepared != nil {
		// One prepared lately, or being prepared: handed over, or asked
		// for again later, without counting another export.
		if answered, err := h.handOver(w, r, user.ID); answered || err != nil {
			return err
		}
	}
	// One at a time per user and a few a day: the export reads everything
	// held about the user for up to ExportTimeout.
	lease, err := h.Exports.Begin(r.Context(), user.ID, h.ExportTimeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.ExportTimeout)
	defer cancel()
	end := func() {
		if err := h.Exports.End(ctx, user.ID, lease); err != nil {
			// The lease lapses at the export's deadline anyway.
			slog.WarnContext(ctx, "account: export not marked over", "error", err.Error())
		}
	}
	exporter := account.Exporter{Reactions: h.Reactions, Comments: h.Comments, History: h.History, Settings: h.Settings, Moderation: h.Moderation}
	first, err := exporter.FirstPages(ctx, user.ID)
	if err == nil && h.Prepared != nil && first.Size() > h.AsyncAbove {
		// The lease goes with the message: PrepareExport ends it.
		return h.prepare(ctx, w, user.ID, lease, end)
	}
	defer end()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	if err := exporter.Write(ctx, w, user.ID, first); err != nil {
		slog.ErrorContext(ctx, "account: export failed after its answer started; aborting the connection", "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	return nil
}
