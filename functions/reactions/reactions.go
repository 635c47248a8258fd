// Package reactionsfn is the Reactions function: the public reactions API.
//
//	PUT  /v1/reactions/{contentId}        set the caller's reaction (If-Match optional)
//	GET  /v1/reactions?ids=a,b            the caller's reactions on up to 50 items
//	POST /v1/moderation/flagged-users     flag or unflag accounts (moderators)
//	GET  /v1/moderation/flagged-users     the flagged accounts, newest first (moderators)
//	GET  /v1/moderation/actions           the moderation audit trail, newest first (moderators)
package reactionsfn

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/pagetoken"
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
	// Group commit: while a transaction runs, the requests that arrive form
	// the next one. Two in flight per instance keep batches large under load
	// (one against the emulator, which runs one transaction at a time).
	wo := outboxstore.WriterOptions(db, 2)
	// The per-user limit is one atomic Bigtable increment per request, the
	// limiter history uses: no Spanner row read and written per reaction.
	// While Bigtable does not answer, this instance decides it alone.
	var limiter reactionstore.Limiter
	if limit := cfg.UserLimits().Reactions; limit > 0 {
		shared := ratelimit.NewBigtable(c.BigtableTx, "reactions", limit)
		limiter = ratelimit.NewDegrading(shared, "reactions", limit, cfg.HTTP.RateLimitBudget, c.Metrics)
	}
	gate := moderationstore.NewGate(cfg.UserLimits().Moderation)
	store := reactionstore.New(db).GateModeration(gate)
	w := reactionstore.NewWriter(store, bus.NewPublisher(c.PubSub, cfg.PubSub.CounterTopic), wo).LimitWith(limiter)
	return Deps{
		Verifier: c.Verifier, Writer: w, Store: store, Moderation: moderationstore.New(db, gate),
		Tokens: pagetoken.NewSigner(cfg.HTTP.PageTokenSecret, cfg.HTTP.PageTokenSecretAccepted), Metrics: c.Metrics,
	}, nil
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
		SetFlagged(ctx context.Context, d moderation.Decision) (int, error)
		ListFlagged(ctx context.Context, after *moderation.Cursor, limit int) ([]moderation.Flag, *moderation.Cursor, error)
	}
	// Moderation admits moderators' listings and reads the audit trail.
	Moderation interface {
		Admit(ctx context.Context, moderatorID string) error
		List(ctx context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier   Verifier
	Writer     Writer
	Store      Store
	Moderation Moderation
	// Tokens sign the moderation listings' page tokens.
	Tokens  pagetoken.Signer
	Metrics *telemetry.Metrics // may be nil
}

type handler struct{ Deps }

// MaxIDs is the most ids one GET names; MaxFlagged the most accounts one
// moderation call names.
const (
	MaxIDs     = 50
	MaxFlagged = 1000
	maxUIDLen  = 128

	defaultFlagPage = 20
	maxFlagPage     = 100
)

// New builds the Reactions handler.
func New(d Deps) http.Handler {
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("PUT /v1/reactions/{contentId}", h.put)
	rt.Handle("GET /v1/reactions", h.get)
	rt.Handle("POST /v1/moderation/flagged-users", h.flag)
	rt.Handle("GET /v1/moderation/flagged-users", h.listFlagged)
	rt.Handle("GET /v1/moderation/actions", h.listActions)
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
		return httpx.InvalidArgument(`reaction is required: "like", "dislike" or "none"`)
	}
	to, err := reaction.Parse(*body.Reaction)
	if err != nil {
		return httpx.InvalidArgument("%s", err.Error())
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
		return httpx.FailedPrecondition("the reaction is at version %d, not the version in If-Match; read it and retry", mismatch.Current)
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "reactions")
		return err
	case err != nil:
		return err
	}
	if res.Undone {
		h.Metrics.ReactionUndone(r.Context())
	}
	w.Header().Set("ETag", etag(res.State.Version))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(session.Header, session.Encode(res.CommitTime))
	writeReaction(w, ReactionBody{
		ContentID: id, Reaction: string(res.State.Current()), Version: res.State.Version, UpdateTime: res.UpdateTime.UTC(),
	})
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
		return nil, httpx.InvalidArgument(`If-Match must be one version, such as "3"`)
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
		return nil, httpx.InvalidArgument(`If-Match must be a version from an ETag, such as "3"`)
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
		out[id] = StateBody{Reaction: string(s.Current()), Version: s.Version}
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, map[string]any{"reactions": out})
	return nil
}

type flagBody struct {
	UserIDs []string `json:"userIds"`
	Flagged *bool    `json:"flagged"`
	Reason  string   `json:"reason"`
}

// moderationRefusal is the answer to a moderation call the gate refused,
// or nil for any other error.
func (h *handler) moderationRefusal(r *http.Request, err error) *httpx.Error {
	var limited *errs.RateLimitedError
	switch {
	case errors.Is(err, moderation.ErrRevoked):
		return httpx.PermissionDenied("your moderator role was revoked")
	case errors.As(err, &limited):
		h.Metrics.RateLimited(r.Context(), "moderation")
		return httpx.AsError(err)
	}
	return nil
}

// admit passes a moderator's listing through the gate.
func (h *handler) admit(r *http.Request, user auth.User) error {
	if err := h.Moderation.Admit(r.Context(), user.ID); err != nil {
		if e := h.moderationRefusal(r, err); e != nil {
			return e
		}
		return err
	}
	return nil
}

func (h *handler) flag(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	if !user.Moderator {
		return httpx.PermissionDenied("only moderators may flag accounts")
	}
	var body flagBody
	if err := httpx.DecodeJSON(w, r, &body); err != nil {
		return err
	}
	if body.Flagged == nil {
		return httpx.InvalidArgument("flagged is required: true or false")
	}
	if len(body.UserIDs) < 1 || len(body.UserIDs) > MaxFlagged {
		return httpx.InvalidArgument("userIds must hold 1 to %d user ids", MaxFlagged)
	}
	for _, u := range body.UserIDs {
		if u == "" || !utf8.ValidString(u) || utf8.RuneCountInString(u) > maxUIDLen {
			return httpx.InvalidArgument("every user id must be 1 to %d characters of valid UTF-8", maxUIDLen)
		}
	}
	if err := moderation.ValidReason(body.Reason); err != nil {
		return httpx.InvalidArgument("%s", err.Error())
	}
	n, err := h.Store.SetFlagged(r.Context(), moderation.Decision{Moderator: user.ID, UserIDs: body.UserIDs, Flagged: *body.Flagged, Reason: body.Reason})
	if e := h.moderationRefusal(r, err); e != nil {
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

func (h *handler) listFlagged(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	if !user.Moderator {
		return httpx.PermissionDenied("only moderators may list flagged accounts")
	}
	q := r.URL.Query()
	size, err := httpx.ParsePageSize(q.Get("pageSize"), defaultFlagPage, maxFlagPage)
	if err != nil {
		return err
	}
	if err := h.admit(r, user); err != nil {
		return err
	}
	var after *moderation.Cursor
	if tok := q.Get("pageToken"); tok != "" {
		payload, err := h.Tokens.Decode(flagScope, tok)
		c, cerr := moderation.ParseCursor(payload)
		if err != nil || cerr != nil {
			return httpx.InvalidArgument("pageToken is not valid for this listing; use the nextPageToken of its previous page")
		}
		after = &c
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
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	if !user.Moderator {
		return httpx.PermissionDenied("only moderators may list moderation actions")
	}
	q := r.URL.Query()
	size, err := httpx.ParsePageSize(q.Get("pageSize"), defaultFlagPage, maxFlagPage)
	if err != nil {
		return err
	}
	f := moderation.Filter{UserID: q.Get("userId"), VideoID: q.Get("videoId")}
	if q.Has("userId") && (f.UserID == "" || !utf8.ValidString(f.UserID) || utf8.RuneCountInString(f.UserID) > maxUIDLen) {
		return httpx.InvalidArgument("userId must be 1 to %d characters of valid UTF-8", maxUIDLen)
	}
	if q.Has("videoId") {
		if err := httpx.ValidateID("videoId", f.VideoID); err != nil {
			return err
		}
	}
	var after *moderation.EntryCursor
	if tok := q.Get("pageToken"); tok != "" {
		payload, err := h.Tokens.Decode(f.ScopeOf(), tok)
		c, cerr := moderation.ParseEntryCursor(payload)
		if err != nil || cerr != nil {
			return httpx.InvalidArgument("pageToken is not valid for this listing; use the nextPageToken of its previous page, with the same userId and videoId")
		}
		after = &c
	}
	if err := h.admit(r, user); err != nil {
		return err
	}
	entries, next, err := h.Moderation.List(r.Context(), f, after, size)
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
