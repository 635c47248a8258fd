// Package commentsfn is the Comments function: the public comments API.
//
//	POST   /v1/videos/{videoId}/comments        post a comment or a reply (Idempotency-Key optional)
//	GET    /v1/videos/{videoId}/comments        visible top-level comments, newest first
//	GET    /v1/comments/{commentId}/replies     visible replies, oldest first
//	DELETE /v1/comments/{commentId}             delete (author, or moderator: gated and audited)
//
// Spam sweeps (POST /v1/moderation/spam) are the Moderation function's.
//
// Every change is recorded in Spanner with its counter deltas in the outbox,
// then published to the counter topic; the counts follow through
// ApplyCounters (see commentstore).
package commentsfn

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/session"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("Comments", host.NeedSpanner|host.NeedBigtable|host.NeedPubSub|host.NeedVerifier,
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
	wo := outboxstore.WriterOptions(db, 8)
	limits := cfg.UserLimits()
	store := commentstore.New(db, limits.Comments).
		GateModeration(moderationstore.NewGate(limits.Moderation)).
		RefuseSpam(comment.SpamRules{DuplicateWindow: cfg.Comments.DuplicateWindow, YoungAge: cfg.Comments.YoungAccountAge}, limits.YoungComments)
	w := commentstore.NewWriter(store, bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic), wo)
	var accounts Accounts
	if young, err := auth.YoungAccountsOf(ctx, cfg); err != nil {
		return Deps{}, err
	} else if young != nil {
		accounts = young
	}
	return Deps{
		Accounts:      accounts,
		Verifier:      c.Verifier,
		Writer:        w,
		Store:         store,
		Counts:        countstore.New(db),
		Tokens:        comment.NewPageTokens(cfg.HTTP.PageTokenSecret, cfg.HTTP.PageTokenSecretAccepted),
		MaxStaleness:  cfg.Counters.CountsMaxStaleness,
		DeleteLimiter: deleteLimiter(c),
		Metrics:       c.Metrics,
	}, nil
}

// deleteLimiter is the per-user limit of comment deletions
// (RATE_LIMIT_OTHER_WRITES), counted in Bigtable as history's limits are,
// which this instance decides alone while Bigtable does not answer; nil
// when the limits are off.
func deleteLimiter(c *host.Clients) Limiter {
	limit := c.Config.UserLimits().OtherWrites
	if limit == 0 {
		return nil
	}
	shared := ratelimit.NewBigtable(c.BigtableTx, "comment-delete", limit)
	return ratelimit.NewDegrading(shared, "comment-delete", limit, c.Config.HTTP.MaxInstances, c.Config.HTTP.RateLimitBudget, c.Metrics)
}

// Interfaces of what the handler uses, declared here where they are consumed.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Writer interface {
		Post(ctx context.Context, r commentstore.CreateRequest) (commentstore.CreateResult, error)
		Delete(ctx context.Context, actor commentstore.Actor, id string) (commentstore.RemoveResult, error)
	}
	Store interface {
		ListVideo(ctx context.Context, videoID string, after *comment.Cursor, size int) (commentstore.Page, error)
		ListReplies(ctx context.Context, parentID string, after *comment.Cursor, size int) (commentstore.Page, error)
	}
	// Limiter admits a user's write or says how long to wait.
	Limiter interface {
		Allow(ctx context.Context, userID string) (retryAfter time.Duration, err error)
	}
	// Accounts answers when the identity provider created an account
	// (*auth.YoungAccounts, or its *auth.AccountCreation); zero when it has
	// no record.
	Accounts interface {
		Created(ctx context.Context, uid string) (time.Time, error)
	}
	// Counts reads the counter engine: the reply counts of a page.
	Counts interface {
		Counts(ctx context.Context, ids []string, viewer *countstore.Viewer, maxStaleness time.Duration) (countstore.Counts, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier Verifier
	Writer   Writer
	Store    Store
	Counts   Counts
	Tokens   comment.PageTokens
	// MaxStaleness bounds how old the reply counts of a listing may be.
	MaxStaleness time.Duration
	// DeleteLimiter limits the deletions of each user; nil: no limit.
	DeleteLimiter Limiter
	// Accounts gives posters' account ages to the young-account rule; nil:
	// no account is young.
	Accounts Accounts
	Metrics  *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

const (
	defaultPageSize = 20
	maxPageSize     = 100
)

// New builds the Comments handler.
func New(d Deps) http.Handler {
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("POST /v1/videos/{videoId}/comments", h.post)
	rt.Handle("GET /v1/videos/{videoId}/comments", h.list)
	rt.Handle("GET /v1/comments/{commentId}/replies", h.replies)
	rt.Handle("DELETE /v1/comments/{commentId}", h.delete)
	return rt
}

// CommentBody is a comment as the API shows it.
type CommentBody struct {
	ID         string    `json:"id"`
	VideoID    string    `json:"videoId"`
	ParentID   string    `json:"parentId,omitempty"`
	AuthorID   string    `json:"authorId"`
	Text       string    `json:"text"`
	CreateTime time.Time `json:"createTime"`
	ReplyCount int64     `json:"replyCount"`
}

func bodyOf(c comment.Comment, replies int64) CommentBody {
	return CommentBody{
		ID: c.ID, VideoID: c.VideoID, ParentID: c.ParentID, AuthorID: c.AuthorID, Text: c.Text,
		CreateTime: c.CreateTime.UTC(), ReplyCount: max(replies, 0),
	}
}

// PageBody is a page of a listing.
type PageBody struct {
	Comments      []CommentBody `json:"comments"`
	NextPageToken string        `json:"nextPageToken,omitempty"`
}

type postBody struct {
	Text     *string `json:"text"`
	ParentID *string `json:"parentId"`
}

func (h *handler) post(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	video := r.PathValue("videoId")
	if err := httpx.ValidateID("videoId", video); err != nil {
		return err
	}
	var key string
	switch keys := r.Header.Values("Idempotency-Key"); len(keys) {
	case 0:
	case 1:
		key = keys[0]
		if err := comment.ValidateIdempotencyKey(key); err != nil {
			return err
		}
	default:
		return httpx.InvalidField(errs.RepeatedParameter, "Idempotency-Key", "send at most one Idempotency-Key header")
	}
	var body postBody
	if err := decodeUTF8JSON(w, r, &body); err != nil {
		return err
	}
	if body.Text == nil {
		return httpx.InvalidField(errs.MissingField, "text", "text is required: 1 to %d characters", comment.MaxTextChars)
	}
	if err := comment.ValidateText(*body.Text); err != nil {
		return err
	}
	var parent string
	if body.ParentID != nil {
		parent = *body.ParentID
		if err := httpx.ValidateID("parentId", parent); err != nil {
			return err
		}
	}
	created, err := h.accountCreated(r.Context(), user.ID)
	if err != nil {
		return err
	}
	res, err := h.Writer.Post(r.Context(), commentstore.CreateRequest{
		UserID: user.ID, VideoID: video, ParentID: parent, Text: *body.Text, IdempotencyKey: key,
		AccountCreated: created,
	})
	if err == nil {
		err = res.Err
	}
	var limited *errs.RateLimitedError
	// The refusals (a parent, the spam rules, a reused key) carry their
	// reason and status.
	switch {
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "comments")
		return err
	case err != nil:
		return err
	}
	var replies int64
	if res.Replayed && !res.Comment.IsReply() {
		counts, err := h.Counts.Counts(r.Context(), []string{res.Comment.ID}, nil, h.MaxStaleness)
		if err != nil {
			return err
		}
		replies = counts.Values[res.Comment.ID].Replies
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(session.Header, session.Encode(res.CommitTime))
	httpx.WriteJSON(w, http.StatusCreated, bodyOf(res.Comment, replies))
	return nil
}

// accountCreated is when uid's account was created, for the young-account
// rule; zero (not young) when the rule is off or the provider has no record
// of the account. The rule fails closed: when the record cannot be read in
// time the post is refused with 503 and Retry-After, and nothing is
// written.
func (h *handler) accountCreated(ctx context.Context, uid string) (time.Time, error) {
	if h.Accounts == nil {
		return time.Time{}, nil
	}
	t, err := h.Accounts.Created(ctx, uid)
	if err != nil {
		slog.WarnContext(ctx, "account records unavailable: the post is refused", "error", err)
		return time.Time{}, httpx.Unavailable(errs.BackendUnavailable, auth.AccountAgeRetryAfter, "the account's age cannot be checked right now; retry after the time in Retry-After")
	}
	return t, nil
}

// decodeUTF8JSON is httpx.DecodeJSON that also refuses strings that are not
// valid UTF-8, which encoding/json would quietly replace with U+FFFD.
func decodeUTF8JSON(w http.ResponseWriter, r *http.Request, v any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpx.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return httpx.TooLarge(httpx.MaxBodyBytes)
	case err != nil:
		return httpx.InvalidArgument(errs.InvalidJSON, "the body could not be read")
	}
	if err := comment.CheckJSONText(raw); err != nil {
		return httpx.InvalidArgument(errs.InvalidJSON, "the body must be valid UTF-8 and hold no unpaired surrogate escapes")
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	return httpx.DecodeJSON(w, r, v)
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	video := r.PathValue("videoId")
	if err := httpx.ValidateID("videoId", video); err != nil {
		return err
	}
	size, after, err := h.paging(r, comment.VideoListing(video))
	if err != nil {
		return err
	}
	page, err := h.Store.ListVideo(r.Context(), video, after, size)
	if err != nil {
		return err
	}
	return h.writePage(w, r, comment.VideoListing(video), page, true)
}

func (h *handler) replies(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("commentId")
	if err := httpx.ValidateID("commentId", id); err != nil {
		return err
	}
	size, after, err := h.paging(r, comment.RepliesListing(id))
	if err != nil {
		return err
	}
	page, err := h.Store.ListReplies(r.Context(), id, after, size)
	if errors.Is(err, commentstore.ErrNotFound) {
		return httpx.NotFound(errs.CommentNotFound, "no visible comment %s", id)
	}
	if err != nil {
		return err
	}
	// Replies have no replies (threads are one level deep): no count to read.
	return h.writePage(w, r, comment.RepliesListing(id), page, false)
}

func (h *handler) paging(r *http.Request, l comment.Listing) (int, *comment.Cursor, error) {
	q := r.URL.Query()
	size, err := httpx.ParsePageSize(q.Get("pageSize"), defaultPageSize, maxPageSize)
	if err != nil {
		return 0, nil, err
	}
	tok := q.Get("pageToken")
	if tok == "" {
		return size, nil, nil
	}
	c, err := h.Tokens.Decode(l, tok)
	if err != nil {
		return 0, nil, httpx.InvalidField(errs.InvalidPageToken, "pageToken", "pageToken is not valid for this listing; use the nextPageToken of its previous page")
	}
	return size, &c, nil
}

// writePage answers a page, with the reply counts of its comments read from
// the counter engine in one batched read.
func (h *handler) writePage(w http.ResponseWriter, r *http.Request, l comment.Listing, page commentstore.Page, withReplies bool) error {
	var counts countstore.Counts
	if withReplies && len(page.Comments) > 0 {
		ids := make([]string, len(page.Comments))
		for i, c := range page.Comments {
			ids[i] = c.ID
		}
		var err error
		if counts, err = h.Counts.Counts(r.Context(), ids, nil, h.MaxStaleness); err != nil {
			return err
		}
	}
	out := PageBody{Comments: make([]CommentBody, 0, len(page.Comments))}
	for _, c := range page.Comments {
		out.Comments = append(out.Comments, bodyOf(c, counts.Values[c.ID].Replies))
	}
	if page.Next != nil {
		out.NextPageToken = h.Tokens.Encode(l, *page.Next)
	}
	// Fresh on every read: an author looks for their comment right after posting.
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	id := r.PathValue("commentId")
	if err := httpx.ValidateID("commentId", id); err != nil {
		return err
	}
	if l := h.DeleteLimiter; l != nil {
		wait, err := l.Allow(r.Context(), user.ID)
		if err != nil {
			return err
		}
		if wait > 0 {
			h.Metrics.RateLimited(r.Context(), "comment-delete")
			return &errs.RateLimitedError{What: "comment deletions", RetryAfter: wait}
		}
	}
	reason := r.URL.Query().Get("reason")
	if err := moderation.ValidReason(reason); err != nil {
		return httpx.InvalidField(errs.InvalidValue, "reason", "%s", err.Error())
	}
	res, err := h.Writer.Delete(r.Context(), commentstore.Actor{UserID: user.ID, Moderator: user.Moderator, Reason: reason}, id)
	var limited *errs.RateLimitedError
	switch {
	case errors.Is(err, commentstore.ErrNotFound):
		return httpx.NotFound(errs.CommentNotFound, "no comment %s", id)
	case errors.Is(err, moderation.ErrRevoked):
		return httpx.PermissionDenied(errs.ModeratorRevoked, "your moderator role was revoked: only your own comments may be deleted")
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "moderation")
		return err
	case err != nil:
		return err
	}
	w.Header().Set(session.Header, session.Encode(res.CommitTime))
	w.WriteHeader(http.StatusNoContent)
	return nil
}
