package accountfn

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/objects"
)

// A large account's export is prepared in the exports bucket by the same
// writer the streamed export uses, under exports/<user key>/<start>:
// <start>.pending while it is prepared, <start>.json once whole (an object
// exists only once its upload completed). The bucket's lifecycle deletes
// both a day later.
const (
	preparedPrefix = "exports/"
	// handOverFor is how long after it is prepared an export is handed
	// over by every GET, counting no new export.
	handOverFor = time.Hour
	// linkFor is how long a handed-over URL downloads the export.
	linkFor = 15 * time.Minute
	// pollAfter is the Retry-After of an export being prepared.
	pollAfter = 5 * time.Second
)

// preparedDir is the prefix of a user's prepared exports: base64url of the
// user id, since user ids may hold any character.
func preparedDir(userID string) string {
	return preparedPrefix + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "/"
}

type exportLinkJSON struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

type exportPreparingJSON struct {
	Status string `json:"status"`
}

func writePreparing(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "private, no-store")
	w.Header().Set("Retry-After", strconv.Itoa(int(pollAfter/time.Second)))
	httpx.WriteJSON(w, http.StatusAccepted, exportPreparingJSON{Status: "preparing"})
}

// handOver answers for the user's export prepared within handOverFor (200
// with a signed URL) or being prepared (202), and reports whether it
// answered. A preparation older than the export's deadline was lost with
// its instance: its lease has lapsed too, and the next export may start.
func (h *handler) handOver(w http.ResponseWriter, r *http.Request, userID string) (bool, error) {
	objs, err := h.Prepared.List(r.Context(), preparedDir(userID))
	if err != nil {
		return false, err
	}
	now := time.Now()
	var ready *objects.Object
	preparing := false
	for i, o := range objs {
		switch {
		case strings.HasSuffix(o.Name, ".json") && now.Sub(o.Created) < handOverFor:
			if ready == nil || o.Created.After(ready.Created) {
				ready = &objs[i]
			}
		case strings.HasSuffix(o.Name, ".pending") && now.Sub(o.Created) < h.ExportTimeout:
			preparing = true
		}
	}
	if ready == nil && !preparing {
		return false, nil
	}
	if ready == nil {
		writePreparing(w)
		return true, nil
	}
	expires := now.Add(linkFor).UTC().Truncate(time.Second)
	u, err := h.Prepared.SignedURL(ready.Name, expires)
	if err != nil {
		return false, err
	}
	w.Header().Set("Cache-Control", "private, no-store")
	httpx.WriteJSON(w, http.StatusOK, exportLinkJSON{URL: u, ExpiresAt: expires})
	return true, nil
}

// prepare marks the export being prepared, answers 202 and writes the
// document to the bucket after the answer, within the export's deadline
// (ctx); end frees the user's lease when it is over, however it ends.
func (h *handler) prepare(ctx context.Context, cancel context.CancelFunc, end func(), w http.ResponseWriter, userID string, first firstPages) error {
	base := fmt.Sprintf("%s%d", preparedDir(userID), time.Now().UnixNano())
	marker := h.Prepared.Write(ctx, base+".pending", "text/plain")
	if err := marker.Close(); err != nil {
		end()
		cancel()
		return err
	}
	go func() {
		defer cancel()
		defer end()
		defer func() {
			dctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer stop()
			if err := h.Prepared.Delete(dctx, base+".pending"); err != nil {
				// Past the deadline it no longer counts; the lifecycle deletes it.
				slog.WarnContext(dctx, "account: prepared export's marker not deleted", "error", err.Error())
			}
		}()
		if err := h.writePrepared(ctx, base+".json", userID, first); err != nil {
			slog.ErrorContext(ctx, "account: export not prepared; the next request starts another", "error", err.Error())
		}
	}()
	writePreparing(w)
	return nil
}

// writePrepared writes the export to the object name: whole, or not at all.
func (h *handler) writePrepared(ctx context.Context, name, userID string, first firstPages) error {
	wctx, abandon := context.WithCancel(ctx)
	defer abandon()
	ow := h.Prepared.Write(wctx, name, "application/json; charset=utf-8")
	if err := h.stream(ctx, newObjectStream(ow), userID, first); err != nil {
		abandon() // the upload is dropped, not completed
		return errors.Join(err, ow.Close())
	}
	return ow.Close()
}

// deletePrepared deletes the user's prepared exports (the account erasure).
func (h *handler) deletePrepared(ctx context.Context, userID string) error {
	if h.Prepared == nil {
		return nil
	}
	objs, err := h.Prepared.List(ctx, preparedDir(userID))
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := h.Prepared.Delete(ctx, o.Name); err != nil {
			return err
		}
	}
	return nil
}
