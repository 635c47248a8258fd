// Package moderationfn is the Moderation function: every moderator's route.
//
//	POST /v1/moderation/flagged-users     flag or unflag accounts
//	GET  /v1/moderation/flagged-users     the flagged accounts, newest first
//	GET  /v1/moderation/actions           the moderation audit trail, newest first
//	POST /v1/moderation/spam              mark up to 1,000 comments as spam
//
// Flags and the audit trail are moderation's own store
// (shared/moderation/moderationstore). A spam mark removes comments: the
// comment store writes it, with the comments' tallies and counter deltas,
// in one transaction (shared/comment/commentstore).
package moderationfn

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/pagetoken"
	"github.com/videngage/engagement/shared/session"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("Moderation", host.NeedSpanner|host.NeedPubSub|host.NeedVerifier,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			deps, err := Build(c)
			if err != nil {
				return nil, err
			}
			return New(deps), nil
		})
}

// Build wires the handler's collaborators from an instance's clients.
func Build(c *host.Clients) (Deps, error) {
	cfg := c.Config
	db := spannerdb.Wrap(c.Spanner, cfg)
	gate := moderationstore.NewGate(cfg.UserLimits().Moderation)
	comments := commentstore.New(db, 0).GateModeration(gate)
	return Deps{
		Verifier: c.Verifier,
		Store:    moderationstore.New(db, gate),
		Spam:     commentstore.NewWriter(comments, bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic), outboxstore.WriterOptions(db, 8)),
		Tokens:   pagetoken.NewSigner(cfg.HTTP.PageTokenSecret, cfg.HTTP.PageTokenSecretAccepted),
		Metrics:  c.Metrics,
	}, nil
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	// Store records moderators' flags and lists the flags and the audit
	// trail, each call admitted through the moderators' gate.
	Store interface {
		Admit(ctx context.Context, moderatorID string) error
		SetFlagged(ctx context.Context, d moderation.Decision) (int, error)
		ListFlagged(ctx context.Context, after *moderation.Cursor, limit int) ([]moderation.Flag, *moderation.Cursor, error)
		List(ctx context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error)
	}
	// Spam marks comments as spam.
	Spam interface {
		MarkSpam(ctx context.Context, actor commentstore.Actor, ids []string, reason string) (commentstore.RemoveResult, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier Verifier
	Store    Store
	Spam     Spam
	// Tokens sign the listings' page tokens.
	Tokens  pagetoken.Signer
	Metrics *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// MaxFlagged is the most accounts one flag call names.
const (
	MaxFlagged = 1000
	maxUIDLen  = 128

	defaultPage = 20
	maxPage     = 100
)

// New builds the Moderation handler.
func New(d Deps) http.Handler {
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("POST /v1/moderation/flagged-users", h.flag)
	rt.Handle("GET /v1/moderation/flagged-users", h.listFlagged)
	rt.Handle("GET /v1/moderation/actions", h.listActions)
	rt.Handle("POST /v1/moderation/spam", h.spam)
	return rt
}

// refusal is the answer to a moderation call the gate refused, or nil for
// any other error.
func (h *handler) refusal(r *http.Request, err error) error {
	var limited *errs.RateLimitedError
	switch {
	case errors.Is(err, moderation.ErrRevoked):
		return httpx.PermissionDenied(errs.ModeratorRevoked, "your moderator role was revoked")
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "moderation")
		return httpx.AsError(err)
	}
	return nil
}

// admit passes a moderator's listing through the gate.
func (h *handler) admit(r *http.Request, user auth.User) error {
	if err := h.Store.Admit(r.Context(), user.ID); err != nil {
		if e := h.refusal(r, err); e != nil {
			return e
		}
		return err
	}
	return nil
}

type flagBody struct {
	UserIDs []string `json:"userIds"`
	Flagged *bool    `json:"flagged"`
	Reason  string   `json:"reason"`
}

// openAction is the opening every moderation action shares: the caller
// verified as a moderator (what the action does, for the refusal) and the
// request's body decoded. The action checks the body and is admitted
// through the gate by its store, in the transaction that acts.
func openAction[B any](h *handler, w http.ResponseWriter, r *http.Request, what string) (auth.User, B, error) {
	var body B
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return auth.User{}, body, err
	}
	if !user.Moderator {
		return auth.User{}, body, httpx.PermissionDenied(errs.NotModerator, "only moderators may %s", what)
	}
	if err := httpx.DecodeJSON(w, r, &body); err != nil {
		return auth.User{}, body, err
	}
	return user, body, nil
}

func (h *handler) flag(w http.ResponseWriter, r *http.Request) error {
	user, body, err := openAction[flagBody](h, w, r, "flag accounts")
	if err != nil {
		return err
	}
	if body.Flagged == nil {
		return httpx.InvalidField(errs.MissingField, "flagged", "flagged is required: true or false")
	}
	if len(body.UserIDs) < 1 || len(body.UserIDs) > MaxFlagged {
		return httpx.InvalidField(errs.InvalidValue, "userIds", "userIds must hold 1 to %d user ids", MaxFlagged)
	}
	for _, u := range body.UserIDs {
		if u == "" || !utf8.ValidString(u) || utf8.RuneCountInString(u) > maxUIDLen {
			return httpx.InvalidField(errs.InvalidValue, "userIds", "every user id must be 1 to %d characters of valid UTF-8", maxUIDLen)
		}
	}
	if err := moderation.ValidReason(body.Reason); err != nil {
		return httpx.InvalidField(errs.InvalidValue, "reason", "%s", err.Error())
	}
	n, err := h.Store.SetFlagged(r.Context(), moderation.Decision{Moderator: user.ID, UserIDs: body.UserIDs, Flagged: *body.Flagged, Reason: body.Reason})
	if e := h.refusal(r, err); e != nil {
		return e
	}
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]int{"updated": n})
	return nil
}

// flagScope binds the flag listing's page tokens to it.
const flagScope = "moderation\x00flagged-users"

// FlagBody is one flagged account in the listing.
type FlagBody struct {
	UserID    string               `json:"userId"`
	Reason    string               `json:"reason"`
	FlaggedAt time.Time            `json:"flaggedAt"`
	Evidence  *moderation.Evidence `json:"evidence,omitempty"`
}

// FlagPageBody is the answer of GET /v1/moderation/flagged-users.
type FlagPageBody struct {
	Users         []FlagBody `json:"users"`
	NextPageToken string     `json:"nextPageToken,omitempty"`
}

// openListing is the opening every moderation listing shares: the caller
// verified as a moderator (what the listing lists, for the refusal), the
// listing's own parameters checked by scope, which returns the scope its
// page tokens are bound to, the page size, the page token decoded by parse
// (nil on the first page; badToken refuses one that does not open this
// listing), and then the call admitted through the gate: a malformed request
// is refused before it is charged to the moderator's limit.
func openListing[C any](h *handler, r *http.Request, what string, scope func(url.Values) (string, error),
	parse func(string) (C, error), badToken string) (size int, after *C, err error) {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return 0, nil, err
	}
	if !user.Moderator {
		return 0, nil, httpx.PermissionDenied(errs.NotModerator, "only moderators may list %s", what)
	}
	q := r.URL.Query()
	sc, err := scope(q)
	if err != nil {
		return 0, nil, err
	}
	if size, err = httpx.ParsePageSize(q.Get("pageSize"), defaultPage, maxPage); err != nil {
		return 0, nil, err
	}
	if tok := q.Get("pageToken"); tok != "" {
		payload, err := h.Tokens.Decode(sc, tok)
		c, cerr := parse(payload)
		if err != nil || cerr != nil {
			return 0, nil, httpx.InvalidField(errs.InvalidPageToken, "pageToken", "%s", badToken)
		}
		after = &c
	}
	if err := h.admit(r, user); err != nil {
		return 0, nil, err
	}
	return size, after, nil
}

func (h *handler) listFlagged(w http.ResponseWriter, r *http.Request) error {
	size, after, err := openListing(h, r, "flagged accounts", func(url.Values) (string, error) { return flagScope, nil },
		moderation.ParseCursor, "pageToken is not valid for this listing; use the nextPageToken of its previous page")
	if err != nil {
		return err
	}
	flags, next, err := h.Store.ListFlagged(r.Context(), after, size)
	if err != nil {
		return err
	}
	out := FlagPageBody{Users: make([]FlagBody, 0, len(flags))}
	for _, f := range flags {
		out.Users = append(out.Users, FlagBody{UserID: f.UserID, Reason: string(f.Reason), FlaggedAt: f.FlaggedAt.UTC(), Evidence: f.Evidence})
	}
	if next != nil {
		out.NextPageToken = h.Tokens.Encode(flagScope, next.String())
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// ActionPageBody is the answer of GET /v1/moderation/actions.
type ActionPageBody struct {
	Actions       []moderation.Entry `json:"actions"`
	NextPageToken string             `json:"nextPageToken,omitempty"`
}

// listActions lists the audit trail, newest first, optionally of one
// account (userId) or one video (videoId).
func (h *handler) listActions(w http.ResponseWriter, r *http.Request) error {
	var f moderation.Filter
	filter := func(q url.Values) (string, error) {
		f = moderation.Filter{UserID: q.Get("userId"), VideoID: q.Get("videoId")}
		if q.Has("userId") && (f.UserID == "" || !utf8.ValidString(f.UserID) || utf8.RuneCountInString(f.UserID) > maxUIDLen) {
			return "", httpx.InvalidField(errs.InvalidValue, "userId", "userId must be 1 to %d characters of valid UTF-8", maxUIDLen)
		}
		if q.Has("videoId") {
			if err := httpx.ValidateID("videoId", f.VideoID); err != nil {
				return "", err
			}
		}
		return f.ScopeOf(), nil
	}
	size, after, err := openListing(h, r, "moderation actions", filter, moderation.ParseEntryCursor,
		"pageToken is not valid for this listing; use the nextPageToken of its previous page, with the same userId and videoId")
	if err != nil {
		return err
	}
	entries, next, err := h.Store.List(r.Context(), f, after, size)
	if err != nil {
		return err
	}
	out := ActionPageBody{Actions: entries}
	if out.Actions == nil {
		out.Actions = []moderation.Entry{}
	}
	if next != nil {
		out.NextPageToken = h.Tokens.Encode(f.ScopeOf(), next.String())
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

type spamBody struct {
	CommentIDs []string `json:"commentIds"`
	Reason     string   `json:"reason"`
}

func (h *handler) spam(w http.ResponseWriter, r *http.Request) error {
	user, body, err := openAction[spamBody](h, w, r, "mark comments as spam")
	if err != nil {
		return err
	}
	if len(body.CommentIDs) < 1 || len(body.CommentIDs) > comment.MaxRemoveBatch {
		return httpx.InvalidField(errs.InvalidValue, "commentIds", "commentIds must hold 1 to %d comment ids; sweep more in several calls", comment.MaxRemoveBatch)
	}
	for _, id := range body.CommentIDs {
		if err := httpx.ValidateIDIn("commentIds", id); err != nil {
			return err
		}
	}
	if err := moderation.ValidReason(body.Reason); err != nil {
		return httpx.InvalidField(errs.InvalidValue, "reason", "%s", err.Error())
	}
	res, err := h.Spam.MarkSpam(r.Context(), commentstore.Actor{UserID: user.ID, Moderator: true}, body.CommentIDs, body.Reason)
	if e := h.refusal(r, err); e != nil {
		return e
	}
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(session.Header, session.Encode(res.CommitTime))
	httpx.WriteJSON(w, http.StatusOK, map[string]int{"updated": res.Updated})
	return nil
}
