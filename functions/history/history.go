// Package historyfn is the History function: the public watch-history API.
//
//	POST   /v1/history              record a watch (published; applied by ApplyHistory)
//	GET    /v1/history              the caller's history, newest first
//	DELETE /v1/history[?before=]    clear all or older entries
//	DELETE /v1/history/{videoId}    remove one video
//	GET    /v1/history/settings     the caller's settings
//	PUT    /v1/history/settings
package historyfn

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/batch"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterHTTP("History", host.NeedBigtable|host.NeedPubSub|host.NeedFirestore|host.NeedVerifier,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			batch := Batching(c.Config)
			return New(Deps{
				Verifier:        c.Verifier,
				Store:           historystore.New(c.Bigtable),
				Settings:        historystore.NewSettings(c.Firestore),
				Publisher:       bus.NewPublisher(c.PubSub, c.Config.PubSub.HistoryTopic),
				Batch:           batch,
				Tokens:          history.NewPageTokens(c.Config.HTTP.PageTokenSecret, c.Config.HTTP.PageTokenSecretAccepted),
				Limiter:         rateLimiter(c, "history", c.Config.UserLimits().History),
				Deletes:         rateLimiter(c, "history-delete", c.Config.UserLimits().OtherWrites),
				SettingsLimiter: rateLimiter(c, "history-settings", c.Config.UserLimits().OtherWrites),
				Retention:       time.Duration(c.Config.History.MaxAgeDays) * 24 * time.Hour,
				Metrics:         c.Metrics,
			}), nil
		})
}

// Batching reads HISTORY_BATCH_LINGER: the watches
// that arrive while a publish is under way (and within the linger) leave
// together as one message of at most history.MaxBatch watches. One publish
// is in flight at a time, so that the next batch gathers everything that
// arrives meanwhile: each message is one transaction downstream.
func Batching(cfg *config.Config) batch.GroupCommitOptions {
	return batch.GroupCommitOptions{Batched: true, MaxBatch: history.MaxBatch, MaxInFlight: 1, Linger: cfg.History.BatchLinger}
}

// rateLimiter is the per-user limit of one kind of history write, in
// Bigtable beside the history, which this instance decides alone while
// Bigtable does not answer; nil when RATE_LIMITS=off (load tests of one
// user) or the limit is not positive.
func rateLimiter(c *host.Clients, kind string, limit int) Limiter {
	if limit == 0 {
		return nil
	}
	shared := ratelimit.NewBigtable(c.BigtableTx, kind, limit)
	return ratelimit.NewDegrading(shared, kind, limit, c.Config.HTTP.MaxInstances, c.Config.HTTP.RateLimitBudget, c.Metrics)
}

// Interfaces of what the handler uses, declared here where they are consumed.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Store interface {
		List(ctx context.Context, userID string, after *history.Cursor, horizon time.Time, size int) (history.Page, error)
		DeleteVideo(ctx context.Context, userID, videoID string) error
		DeleteBefore(ctx context.Context, userID string, before time.Time) error
	}
	SettingsStore interface {
		Get(ctx context.Context, userID string) (history.Settings, error)
		Put(ctx context.Context, userID string, s history.Settings) error
	}
	Publisher interface {
		Publish(ctx context.Context, data []byte, attrs map[string]string) (string, error)
	}
	// Limiter admits a user's write or says how long to wait.
	Limiter interface {
		Allow(ctx context.Context, userID string) (retryAfter time.Duration, err error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier  Verifier
	Store     Store
	Settings  SettingsStore
	Publisher Publisher
	// Batch groups the publishes of accepted watches (zero: one message
	// per watch).
	Batch  batch.GroupCommitOptions
	Tokens history.PageTokens
	// Limiter limits the watches a user records, Deletes the deletions
	// (of one video or a clear) and SettingsLimiter the settings changes,
	// each on its own; nil: no limit.
	Limiter         Limiter
	Deletes         Limiter
	SettingsLimiter Limiter
	// Retention is the table's (HISTORY_MAX_AGE_DAYS): a read shows no
	// watch older, whether or not garbage collection removed it yet.
	// Zero: none.
	Retention time.Duration
	Metrics   *telemetry.Metrics // may be nil
	Now       func() time.Time
}

type handler struct {
	Deps
	publish *batch.GroupCommit[history.Watch, struct{}]
}

// New builds the History handler.
func New(d Deps) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	h := &handler{Deps: d}
	h.publish = batch.NewGroupCommit(d.Batch, h.publishBatch)
	rt := httpx.NewRouter()
	rt.Handle("POST /v1/history", h.record)
	rt.Handle("GET /v1/history", h.list)
	rt.Handle("DELETE /v1/history", h.clear)
	rt.Handle("DELETE /v1/history/{videoId}", h.deleteVideo)
	rt.Handle("GET /v1/history/settings", h.getSettings)
	rt.Handle("PUT /v1/history/settings", h.putSettings)
	return rt
}

const (
	defaultPageSize = 10
	maxPageSize     = 100
)

type recordRequest struct {
	VideoID         string   `json:"videoId"`
	WatchedAt       *string  `json:"watchedAt"`
	PositionSeconds *float64 `json:"positionSeconds"`
}

func (h *handler) record(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	var req recordRequest
	if err := httpx.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	if err := httpx.ValidateID("videoId", req.VideoID); err != nil {
		return err
	}
	now := h.Now().UTC()
	at := now
	if req.WatchedAt != nil {
		if at, err = time.Parse(time.RFC3339Nano, *req.WatchedAt); err != nil {
			return httpx.InvalidField(errs.InvalidValue, "watchedAt", "watchedAt must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		if at.After(now.Add(history.MaxFuture)) {
			return httpx.InvalidField(errs.InvalidValue, "watchedAt", "watchedAt is more than 5 minutes in the future")
		}
		if at.UnixMilli() <= 0 {
			return httpx.InvalidField(errs.InvalidValue, "watchedAt", "watchedAt must be after 1970-01-01T00:00:00Z")
		}
	}
	var pos float64
	if req.PositionSeconds != nil {
		pos = *req.PositionSeconds
		if !history.ValidPosition(pos) {
			return httpx.InvalidField(errs.InvalidValue, "positionSeconds", "positionSeconds must be from 0 to %d", history.MaxPositionSeconds)
		}
	}
	if err := h.admit(r.Context(), h.Limiter, "history", "history writes", user.ID); err != nil {
		return err
	}
	settings, err := h.Settings.Get(r.Context(), user.ID)
	if err != nil {
		return err
	}
	if settings.Erasing {
		// Refused, not recorded and then erased: a watch is counted as a
		// view, and a view is not taken back.
		return errs.ErrAccountErasing
	}
	if settings.Paused {
		httpx.WriteJSON(w, http.StatusAccepted, map[string]bool{"recorded": false})
		return nil
	}
	watch := history.NewWatch(user.ID, req.VideoID, at, pos)
	watch.RecordedAt = now
	if _, err := h.publish.Do(r.Context(), watch); err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusAccepted, map[string]bool{"recorded": true})
	return nil
}

// publishBatch publishes watches as one message, waiting for Pub/Sub's
// acknowledgement: every request of the batch is answered only then.
func (h *handler) publishBatch(ctx context.Context, ws []history.Watch) ([]struct{}, error) {
	b := history.NewBatch(ws)
	data, err := b.Encode()
	if err != nil {
		return nil, fmt.Errorf("historyfn: encode batch: %w", err)
	}
	if _, err := h.Publisher.Publish(ctx, data, map[string]string{"kind": "watches", "batchId": b.ID}); err != nil {
		return nil, err
	}
	return make([]struct{}, len(ws)), nil
}

// admit counts one write of the user against l (kind names it in the
// metric, what in the answer), or answers 429 with how long to wait.
func (h *handler) admit(ctx context.Context, l Limiter, kind, what, userID string) error {
	if l == nil {
		return nil
	}
	wait, err := l.Allow(ctx, userID)
	if err != nil {
		return err
	}
	if wait > 0 {
		h.Metrics.RateLimited(ctx, kind)
		return &errs.RateLimitedError{What: what, RetryAfter: wait}
	}
	return nil
}

type entryJSON struct {
	VideoID         string  `json:"videoId"`
	WatchedAt       string  `json:"watchedAt"`
	PositionSeconds float64 `json:"positionSeconds"`
}

type listResponse struct {
	Entries       []entryJSON `json:"entries"`
	NextPageToken string      `json:"nextPageToken,omitempty"`
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	size, err := httpx.ParsePageSize(q.Get("pageSize"), defaultPageSize, maxPageSize)
	if err != nil {
		return err
	}
	var after *history.Cursor
	if tok := q.Get("pageToken"); tok != "" {
		c, err := h.Tokens.Decode(user.ID, tok)
		if err != nil {
			return httpx.InvalidField(errs.InvalidPageToken, "pageToken", "pageToken is not valid; use the nextPageToken of a previous page")
		}
		after = &c
	}
	settings, err := h.Settings.Get(r.Context(), user.ID)
	if err != nil {
		return err
	}
	page, err := h.Store.List(r.Context(), user.ID, after, settings.ReadHorizon(h.Now(), h.Retention), size)
	if err != nil {
		return err
	}
	resp := listResponse{Entries: make([]entryJSON, 0, len(page.Entries))}
	for _, e := range page.Entries {
		resp.Entries = append(resp.Entries, entryJSON{
			VideoID:         e.VideoID,
			WatchedAt:       e.WatchedAt.UTC().Format(time.RFC3339Nano),
			PositionSeconds: e.PositionSeconds,
		})
	}
	if page.Next != nil {
		resp.NextPageToken = h.Tokens.Encode(user.ID, *page.Next)
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, resp)
	return nil
}

func (h *handler) clear(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	var before time.Time
	if b := r.URL.Query().Get("before"); b != "" {
		if before, err = time.Parse(time.RFC3339Nano, b); err != nil {
			return httpx.InvalidField(errs.InvalidValue, "before", "before must be an RFC 3339 time such as 2026-01-02T15:04:05Z")
		}
		if before.UnixMilli() <= 0 {
			// Nothing was watched before 1970: nothing to clear.
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
	}
	if err := h.admit(r.Context(), h.Deletes, "history-delete", "history deletions", user.ID); err != nil {
		return err
	}
	if err := h.Store.DeleteBefore(r.Context(), user.ID, before); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) deleteVideo(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	video := r.PathValue("videoId")
	if err := httpx.ValidateID("videoId", video); err != nil {
		return err
	}
	if err := h.admit(r.Context(), h.Deletes, "history-delete", "history deletions", user.ID); err != nil {
		return err
	}
	if err := h.Store.DeleteVideo(r.Context(), user.ID, video); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) getSettings(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	s, err := h.Settings.Get(r.Context(), user.ID)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, s)
	return nil
}

type settingsRequest struct {
	Paused           *bool `json:"paused"`
	AutoDeleteMonths *int  `json:"autoDeleteMonths"`
}

func (h *handler) putSettings(w http.ResponseWriter, r *http.Request) error {
	user, err := h.Verifier.FromRequest(r)
	if err != nil {
		return err
	}
	var req settingsRequest
	if err := httpx.DecodeJSON(w, r, &req); err != nil {
		return err
	}
	if req.Paused == nil || req.AutoDeleteMonths == nil {
		return httpx.InvalidArgument(errs.MissingField, "send both paused (true or false) and autoDeleteMonths (0, 3, 18 or 36)")
	}
	if !history.ValidAutoDeleteMonths(*req.AutoDeleteMonths) {
		return httpx.InvalidField(errs.InvalidValue, "autoDeleteMonths", "autoDeleteMonths must be 0, 3, 18 or 36")
	}
	if err := h.admit(r.Context(), h.SettingsLimiter, "history-settings", "settings changes", user.ID); err != nil {
		return err
	}
	s := history.Settings{Paused: *req.Paused, AutoDeleteMonths: *req.AutoDeleteMonths}
	if err := h.Settings.Put(r.Context(), user.ID, s); err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, s)
	return nil
}
