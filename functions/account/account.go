// Package accountfn is the Account function: the caller's own data.
//
//	GET    /v1/me/export   everything held about the caller as one JSON document: streamed,
//	                       or for a large account prepared in the exports bucket and handed
//	                       over by a signed URL
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
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/objects"
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
				Moderation: moderationstore.New(db, moderationstore.Gate{}),
				Publisher:  bus.NewPublisher(c.PubSub, c.Config.PubSub.ErasureTopic),
				Prepared:   c.Objects.Bucket(c.Config.Objects.ExportsBucket),
				AsyncAbove: c.Config.Export.AsyncAbove,
			}), nil
		})
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Reactions interface {
		ListByUser(ctx context.Context, userID, after string, limit int) ([]reactionstore.UserReaction, error)
	}
	Comments interface {
		ListByAuthor(ctx context.Context, userID, after string, limit int) ([]comment.Comment, error)
	}
	History interface {
		List(ctx context.Context, userID string, after *history.Cursor, horizon time.Time, size int) (history.Page, error)
	}
	Settings interface {
		Get(ctx context.Context, userID string) (history.Settings, error)
		MarkErasing(ctx context.Context, userID string) error
	}
	// Moderation reads the audit trail's entries about the caller.
	Moderation interface {
		List(ctx context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error)
	}
	Erasures interface {
		Request(ctx context.Context, userID string) (account.Erasure, error)
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
	Reactions  Reactions
	Comments   Comments
	History    History
	Settings   Settings
	Moderation Moderation
	Erasures   Erasures
	ErasureLog ErasureLog
	Exports    Exports
	Publisher  Publisher // the erasure topic
	// Prepared is the bucket of the exports prepared asynchronously; nil
	// streams every export.
	Prepared *objects.Bucket
	// AsyncAbove is the bound over which an export is prepared
	// asynchronously (EXPORT_ASYNC_ABOVE; ≤ 0: 1000): more reactions and
	// history entries in the first pages it reads before answering.
	AsyncAbove int
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
func (h *handler) erase(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	start := account.Starter{Log: h.ErasureLog, Records: h.Erasures, Settings: h.Settings, Next: h.Publisher}
	if err := start.Start(r.Context(), user.ID); err != nil {
		return err
	}
	if err := h.deletePrepared(r.Context(), user.ID); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusAccepted, map[string]bool{"erasing": true})
	return nil
}

// Page sizes of the export's reads: each page is one bounded read.
const (
	reactionPage = 500
	commentPage  = 200
	historyPage  = 1000
	actionPage   = 500
)

type reactionJSON struct {
	ContentID  string    `json:"contentId"`
	Reaction   string    `json:"reaction"`
	Version    int64     `json:"version"`
	UpdateTime time.Time `json:"updateTime"`
}

type commentJSON struct {
	ID         string    `json:"id"`
	VideoID    string    `json:"videoId"`
	ParentID   string    `json:"parentId,omitempty"`
	Text       string    `json:"text"`
	Status     string    `json:"status"`
	CreateTime time.Time `json:"createTime"`
	UpdateTime time.Time `json:"updateTime"`
}

type entryJSON struct {
	VideoID         string    `json:"videoId"`
	WatchedAt       time.Time `json:"watchedAt"`
	PositionSeconds float64   `json:"positionSeconds"`
}

// export streams {"reactions":[…],"comments":[…],"history":[…],"moderation":[…],"settings":{…}}:
// each store is read a page at a time and each item written as it is read,
// so that the function holds one page, never the account. The first page is
// read before the answer starts, so that a backend down at the start is a
// 503; a failure after the first byte can no longer change the status, so
// the connection is aborted and the client sees a truncated document (an
// unterminated chunked body), never a complete-looking partial one.
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
	end := func() {
		if err := h.Exports.End(ctx, user.ID, lease); err != nil {
			// The lease lapses at the export's deadline anyway.
			slog.WarnContext(ctx, "account: export not marked over", "error", err.Error())
		}
	}
	first, err := h.firstPages(ctx, user.ID)
	if err == nil && h.Prepared != nil && first.size() > h.AsyncAbove {
		// The lease and the deadline go with the preparation.
		return h.prepare(ctx, cancel, end, w, user.ID, first)
	}
	defer cancel()
	defer end()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "private, no-store")
	w.WriteHeader(http.StatusOK)
	s := newObjectStream(w)
	if err := h.stream(ctx, s, user.ID, first); err != nil {
		slog.ErrorContext(ctx, "account: export failed after its answer started; aborting the connection", "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	return nil
}

// firstPages are the pages an export reads before it answers: a backend
// down then is a 503, and their size decides whether the export is
// streamed or prepared.
type firstPages struct {
	reactions []reactionstore.UserReaction
	history   history.Page
}

func (f firstPages) size() int { return len(f.reactions) + len(f.history.Entries) }

func (h *handler) firstPages(ctx context.Context, userID string) (firstPages, error) {
	var f firstPages
	var err error
	if f.reactions, err = h.Reactions.ListByUser(ctx, userID, "", reactionPage); err != nil {
		return f, err
	}
	f.history, err = h.History.List(ctx, userID, nil, time.Time{}, historyPage)
	return f, err
}

func (h *handler) stream(ctx context.Context, s *objectStream, userID string, first firstPages) error {
	page := first.reactions
	s.beginArray("reactions")
	for len(page) > 0 {
		for _, r := range page {
			s.item(reactionJSON{ContentID: r.ContentID, Reaction: string(r.State.Current()), Version: r.State.Version, UpdateTime: r.UpdateTime.UTC()})
		}
		if s.err != nil || len(page) < reactionPage {
			break
		}
		var err error
		if page, err = h.Reactions.ListByUser(ctx, userID, page[len(page)-1].ContentID, reactionPage); err != nil {
			return err
		}
	}
	s.endArray()

	s.beginArray("comments")
	for lastID := ""; s.err == nil; {
		cs, err := h.Comments.ListByAuthor(ctx, userID, lastID, commentPage)
		if err != nil {
			return err
		}
		for _, c := range cs {
			s.item(commentJSON{ID: c.ID, VideoID: c.VideoID, ParentID: c.ParentID, Text: c.Text, Status: string(c.Status),
				CreateTime: c.CreateTime.UTC(), UpdateTime: c.UpdateTime.UTC()})
		}
		if len(cs) < commentPage {
			break
		}
		lastID = cs[len(cs)-1].ID
	}
	s.endArray()

	// Every entry held, also those past the user's auto-delete horizon that
	// are not deleted yet: the export shows what is stored, not what the
	// history listing shows.
	s.beginArray("history")
	var after *history.Cursor
	for p := first.history; s.err == nil; {
		if after != nil {
			var err error
			if p, err = h.History.List(ctx, userID, after, time.Time{}, historyPage); err != nil {
				return err
			}
		}
		for _, e := range p.Entries {
			s.item(entryJSON{VideoID: e.VideoID, WatchedAt: e.WatchedAt.UTC(), PositionSeconds: e.PositionSeconds})
		}
		if p.Next == nil {
			break
		}
		after = p.Next
	}
	s.endArray()

	// The moderation audit trail's entries about the user: one key range.
	s.beginArray("moderation")
	var afterAction *moderation.EntryCursor
	for s.err == nil {
		es, next, err := h.Moderation.List(ctx, moderation.Filter{UserID: userID}, afterAction, actionPage)
		if err != nil {
			return err
		}
		for _, e := range es {
			s.item(e)
		}
		if next == nil {
			break
		}
		afterAction = next
	}
	s.endArray()

	settings, err := h.Settings.Get(ctx, userID)
	if err != nil {
		return err
	}
	s.member("settings", settings)
	return s.end()
}
