package accountfn

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/objects"
)

// A large account's export is prepared in the exports bucket
// (account.PreparedExport) by PrepareExport, and handed over from there
// by signed URLs. The bucket's lifecycle deletes its objects a day later.
const (
	// handOverFor is how long after it is prepared an export is handed
	// over by every GET, counting no new export.
	handOverFor = time.Hour
	// linkFor is how long a handed-over URL downloads the export.
	linkFor = 15 * time.Minute
	// pollAfter is the Retry-After of an export being prepared.
	pollAfter = 5 * time.Second
)

// exportLinkJSON is the link to a prepared export; kind ("link") tells it
// from the export itself ("export").
type exportLinkJSON struct {
	Kind      string    `json:"kind"`
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
// its message or its preparation: its lease has lapsed too, and the next
// export may start.
func (h *handler) handOver(w http.ResponseWriter, r *http.Request, userID string) (bool, error) {
	objs, err := h.Prepared.List(r.Context(), account.PreparedDir(userID))
	if err != nil {
		return false, err
	}
	now := time.Now()
	var ready *objects.Object
	preparing := false
	for i, o := range objs {
		switch {
		case strings.HasSuffix(o.Name, account.DocumentSuffix) && now.Sub(o.Created) < handOverFor:
			if ready == nil || o.Created.After(ready.Created) {
				ready = &objs[i]
			}
		case strings.HasSuffix(o.Name, account.PendingSuffix) && now.Sub(o.Created) < h.ExportTimeout:
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
	httpx.WriteJSON(w, http.StatusOK, exportLinkJSON{Kind: "link", URL: u, ExpiresAt: expires})
	return true, nil
}

// prepare marks the export being prepared, publishes it to PrepareExport
// with the user's lease, which PrepareExport ends, and answers 202. A
// publish that fails withdraws the marker and ends the lease, so that the
// client's retry starts the export again; were either left behind, it
// lapses at the export's deadline (ctx's).
func (h *handler) prepare(ctx context.Context, w http.ResponseWriter, userID, lease string, end func()) error {
	deadline, _ := ctx.Deadline()
	export := account.NewPreparedExport(userID, time.Now())
	if err := h.Prepared.Write(ctx, export.Pending(), "text/plain").Close(); err != nil {
		end()
		return err
	}
	msg, err := account.ExportMessage{UserID: userID, Export: export, Lease: lease, Deadline: deadline.UTC()}.Encode()
	if err == nil {
		_, err = h.ExportTopic.Publish(ctx, msg, map[string]string{events.AttrKind: account.ExportKind})
	}
	if err != nil {
		if derr := h.Prepared.Delete(ctx, export.Pending()); derr != nil {
			slog.WarnContext(ctx, "account: unpublished export's marker not deleted; it lapses at the export's deadline", "error", derr.Error())
		}
		end()
		return err
	}
	writePreparing(w)
	return nil
}

// deletePrepared deletes the user's prepared exports (the account erasure).
func (h *handler) deletePrepared(ctx context.Context, userID string) error {
	if h.Prepared == nil {
		return nil
	}
	objs, err := h.Prepared.List(ctx, account.PreparedDir(userID))
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
