// Package countsfn is the Counts function: GET /v1/counts?ids=a,b,… (1–50).
// Anonymous answers may be cached publicly for COUNTS_MAX_AGE; with a token
// the answer adds the caller's reactions and the caller's own changes not yet
// counted, and is private.
package countsfn

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/counterstore"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/platform"
	"github.com/videngage/engagement/shared/spannerdb"
)

func init() {
	platform.RegisterHTTP("Counts", platform.NeedSpanner|platform.NeedVerifier,
		func(ctx context.Context, c *platform.Clients) (http.Handler, error) {
			cfg := c.Config
			return New(Deps{
				Verifier:     c.Verifier,
				Store:        counterstore.New(spannerdb.Wrap(c.Spanner, cfg), counterstore.Options{}),
				MaxAge:       cfg.HTTP.CountsMaxAge,
				MaxStaleness: cfg.Counters.CountsMaxStaleness,
			}), nil
		})
}

// Interfaces of what the handler uses.
type (
	Verifier interface {
		FromRequest(*http.Request) (auth.User, error)
	}
	Store interface {
		Counts(ctx context.Context, ids []string, viewer *counterstore.Viewer, maxStaleness time.Duration) (counterstore.Counts, error)
	}
)

// Deps are the handler's collaborators.
type Deps struct {
	Verifier     Verifier
	Store        Store
	MaxAge       time.Duration
	MaxStaleness time.Duration
}

// MaxIDs is the most ids one request names.
const MaxIDs = 50

type handler struct{ Deps }

// New builds the Counts handler.
func New(d Deps) http.Handler {
	h := &handler{d}
	rt := httpx.NewRouter()
	rt.Handle("GET /v1/counts", h.get)
	return rt
}

// ReactionBody is one of the viewer's reactions.
type ReactionBody struct {
	Reaction string `json:"reaction"`
	Version  int64  `json:"version"`
}

// ViewerBody is the viewer part of the answer.
type ViewerBody struct {
	Reactions map[string]ReactionBody `json:"reactions"`
}

// Count is one id's counts: the counted fields and the estimate of its
// distinct viewers.
type Count struct {
	counter.Values
	UniqueViewers int64 `json:"uniqueViewers"`
}

// Body is the answer.
type Body struct {
	Counts map[string]Count `json:"counts"`
	Viewer *ViewerBody      `json:"viewer,omitempty"`
}

func (h *handler) get(w http.ResponseWriter, r *http.Request) error {
	ids, err := httpx.ParseIDs(r.URL.Query().Get("ids"), MaxIDs)
	if err != nil {
		return err
	}
	var viewer *counterstore.Viewer
	if len(r.Header.Values("Authorization")) > 0 {
		// A token is optional, but one that is sent must be valid.
		user, err := h.Verifier.FromRequest(r)
		if err != nil {
			if errors.Is(err, auth.ErrMissingToken) {
				return fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
			}
			return err
		}
		viewer = &counterstore.Viewer{UserID: user.ID}
	}
	c, err := h.Store.Counts(r.Context(), ids, viewer, h.MaxStaleness)
	if err != nil {
		return err
	}
	body := Body{Counts: make(map[string]Count, len(c.Values))}
	for id, v := range c.Values {
		body.Counts[id] = Count{Values: v, UniqueViewers: c.UniqueViewers[id]}
	}
	w.Header().Add("Vary", "Authorization")
	if viewer != nil {
		body.Viewer = &ViewerBody{Reactions: make(map[string]ReactionBody, len(ids))}
		for _, id := range ids {
			vr, ok := c.Reactions[id]
			if !ok {
				vr = counterstore.ViewerReaction{Reaction: "none"}
			}
			body.Viewer.Reactions[id] = ReactionBody{Reaction: vr.Reaction, Version: vr.Version}
		}
		w.Header().Set("Cache-Control", "private, no-store")
	} else {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(h.MaxAge/time.Second)))
	}
	httpx.WriteJSON(w, http.StatusOK, body)
	return nil
}
