// Package prepareexportfn is the PrepareExport event function: it writes a
// large account's export (GET /v1/me/export answered 202) to the exports
// bucket, one export a message, with the writer the streamed export uses.
//
// The export's state is in the bucket, not in the message: the marker
// Account wrote says it is wanted, the document that it is done. A message
// for an export already prepared, or withdrawn (its marker deleted by the
// account's erasure), or past its deadline, writes nothing, so redeliveries
// and duplicates are harmless; one for an export whose preparation died
// writes it again (an object exists only once its upload completed).
package prepareexportfn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/videngage/engagement/functions/host"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/objects"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/spannerdb"
	"github.com/videngage/engagement/shared/telemetry"
)

func init() {
	host.RegisterPush("PrepareExport", host.NeedSpanner|host.NeedBigtable|host.NeedFirestore|host.NeedObjects,
		func(ctx context.Context, c *host.Clients) (http.Handler, error) {
			db := spannerdb.Wrap(c.Spanner, c.Config)
			return New(Deps{
				Exporter: account.Exporter{
					Reactions: reactionstore.New(db),
					Comments:  commentstore.New(db, 0),
					History:   historystore.New(c.Bigtable),
					Settings:  historystore.NewSettings(c.Firestore),
					// The export only reads the trail: no gate.
					Moderation: moderationstore.New(db, moderationstore.Gate{}),
				},
				Exports:  accountstore.NewExports(c.Firestore, c.Config.UserLimits().ExportsPerDay),
				Prepared: c.Objects.Bucket(c.Config.Objects.ExportsBucket),
			}, c.Metrics), nil
		})
}

const name = "PrepareExport"

// MaxRun bounds one delivery: under the ack deadline of the function's
// subscription (600 s, topology.json), so that Pub/Sub never redelivers a
// message whose preparation is still running. An export's deadline is at
// most ten minutes after its request, which is before the delivery, so a
// delivery that starts at once still ends by its export's deadline.
const MaxRun = 9*time.Minute + 30*time.Second

// Exports ends a user's export lease (*accountstore.Exports).
type Exports interface {
	End(ctx context.Context, userID, lease string) error
}

// Deps are the function's collaborators.
type Deps struct {
	Exporter account.Exporter
	Exports  Exports
	Prepared *objects.Bucket
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// New returns the event function's push handler (host.Push). m may be nil.
func New(d Deps, m *telemetry.Metrics) http.Handler {
	if d.Now == nil {
		d.Now = time.Now
	}
	return host.Push(name, m, func(ctx context.Context, msg bus.Message) error {
		em, err := account.DecodeExportMessage(msg.Data)
		if err != nil {
			return fmt.Errorf("%w: %w", bus.ErrPoison, err)
		}
		return d.prepare(ctx, em)
	})
}

func (d Deps) prepare(ctx context.Context, m account.ExportMessage) error {
	if !d.Now().Before(m.Deadline) {
		// The user's lease and the marker have lapsed: the next GET starts
		// another export.
		slog.WarnContext(ctx, "prepareexport: export past its deadline; dropped", "deadline", m.Deadline)
		return nil
	}
	ctx, cancel := context.WithDeadline(ctx, m.Deadline)
	defer cancel()
	ctx, cancelRun := context.WithTimeout(ctx, MaxRun)
	defer cancelRun()

	state, err := d.state(ctx, m.Export)
	if err != nil {
		return d.failed(ctx, m, err)
	}
	switch {
	case state.document && state.pending:
		// Prepared by an earlier delivery that failed after: what follows
		// the document is done again.
		return d.done(ctx, m)
	case state.document:
		return nil // prepared, and done
	case !state.pending:
		slog.InfoContext(ctx, "prepareexport: export withdrawn; nothing to prepare")
		return nil
	}
	first, err := d.Exporter.FirstPages(ctx, m.UserID)
	if err == nil {
		err = d.write(ctx, m, first)
	}
	if errors.Is(err, objects.ErrExists) {
		err = nil // a concurrent delivery wrote it whole
	}
	if err != nil {
		return d.failed(ctx, m, err)
	}
	// An erasure asked for while the export was written (it marks the
	// settings, then deletes the user's exports) may have missed the
	// document: the document goes too.
	settings, err := d.Exporter.Settings.Get(ctx, m.UserID)
	if err != nil {
		return d.failed(ctx, m, err)
	}
	if settings.Erasing {
		if err := d.Prepared.Delete(ctx, m.Export.Document()); err != nil {
			return d.failed(ctx, m, err)
		}
		return nil
	}
	return d.done(ctx, m)
}

type exportState struct{ pending, document bool }

// state lists the export's objects.
func (d Deps) state(ctx context.Context, e account.PreparedExport) (exportState, error) {
	objs, err := d.Prepared.List(ctx, e.Prefix())
	if err != nil {
		return exportState{}, err
	}
	var s exportState
	for _, o := range objs {
		s.pending = s.pending || o.Name == e.Pending()
		s.document = s.document || o.Name == e.Document()
	}
	return s, nil
}

// write writes the export's document: whole, or not at all.
func (d Deps) write(ctx context.Context, m account.ExportMessage, first account.FirstPages) error {
	wctx, abandon := context.WithCancel(ctx)
	defer abandon()
	ow := d.Prepared.Write(wctx, m.Export.Document(), "application/json; charset=utf-8")
	if err := d.Exporter.Write(ctx, ow, m.UserID, first); err != nil {
		abandon() // the upload is dropped, not completed
		return errors.Join(err, ow.Close())
	}
	return ow.Close()
}

// done frees the user's next export, then deletes the marker, which says
// that both are done; a failure is redelivered, which finds the document
// and the marker and comes back here.
func (d Deps) done(ctx context.Context, m account.ExportMessage) error {
	if err := d.Exports.End(ctx, m.UserID, m.Lease); err != nil {
		return err
	}
	return d.Prepared.Delete(ctx, m.Export.Pending())
}

// failed is what a failed preparation answers: past the export's deadline
// nothing is redelivered (the user's next GET starts another export);
// before it, Pub/Sub redelivers.
func (d Deps) failed(ctx context.Context, m account.ExportMessage, err error) error {
	if !d.Now().Before(m.Deadline) {
		slog.WarnContext(ctx, "prepareexport: export not prepared by its deadline; dropped", "error", err.Error())
		return nil
	}
	slog.WarnContext(ctx, "prepareexport: export not prepared; Pub/Sub will redeliver", "error", err.Error())
	return fmt.Errorf("prepareexport: %s: %w", strings.TrimPrefix(string(m.Export), account.PreparedDir(m.UserID)), err)
}
