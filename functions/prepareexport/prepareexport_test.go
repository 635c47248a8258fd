package prepareexportfn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	prepareexportfn "github.com/videngage/engagement/functions/prepareexport"
	"github.com/videngage/engagement/internal/accounttest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/objects"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/topology"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// store is a user's account of n reactions and n history entries; the
// history fails while failHistory is set.
type store struct {
	n           int
	failHistory bool
	erasing     bool // the account's erasure is under way
	reads       int
}

func (s *store) ListByUser(_ context.Context, _ string, after string, limit int) ([]reaction.UserReaction, error) {
	s.reads++
	start := accounttest.Next("v%06d", after)
	var out []reaction.UserReaction
	for i := start; i < s.n && len(out) < limit; i++ {
		out = append(out, reaction.UserReaction{ContentID: fmt.Sprintf("v%06d", i), State: reaction.State{Reaction: reaction.Like, Version: 1}, UpdateTime: time.Unix(1700000000, 0)})
	}
	return out, nil
}

func (s *store) ListByAuthor(context.Context, string, string, int) ([]comment.Comment, error) {
	return nil, nil
}

func (s *store) List(_ context.Context, _ string, after *history.Cursor, _ time.Time, size int) (history.Page, error) {
	s.reads++
	if s.failHistory {
		return history.Page{}, fmt.Errorf("%w: bigtable is down", errs.ErrBackendUnavailable)
	}
	start := 0
	if after != nil {
		start = accounttest.Next("h%06d", after.VideoID)
	}
	var p history.Page
	for i := start; i < s.n && len(p.Entries) < size; i++ {
		p.Entries = append(p.Entries, history.Entry{VideoID: fmt.Sprintf("h%06d", i), WatchedAt: time.Unix(1700000000-int64(i), 0)})
	}
	if start+len(p.Entries) < s.n {
		last := p.Entries[len(p.Entries)-1]
		p.Next = &history.Cursor{At: last.WatchedAt, VideoID: last.VideoID}
	}
	return p, nil
}

func (s *store) Get(context.Context, string) (history.Settings, error) {
	return history.Settings{Erasing: s.erasing}, nil
}

func (s *store) Trail() account.ExportModeration { return trail{} }

type trail struct{}

func (trail) List(context.Context, moderation.Filter, *moderation.EntryCursor, int) ([]moderation.Entry, *moderation.EntryCursor, error) {
	return nil, nil, nil
}

// leases records the leases ended.
type leases struct{ ended []string }

func (l *leases) End(_ context.Context, user, lease string) error {
	l.ended = append(l.ended, user+"/"+lease)
	return nil
}

type world struct {
	bucket  *objects.Bucket
	store   *store
	leases  *leases
	handler func(t *testing.T, m account.ExportMessage) pushtest.Outcome
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	w := &world{bucket: emulatortest.ExportsBucket(t), store: &store{n: n}, leases: &leases{}}
	h := prepareexportfn.New(prepareexportfn.Deps{
		Exporter: account.Exporter{Reactions: w.store, Comments: w.store, History: w.store, Settings: w.store, Moderation: w.store.Trail()},
		Exports:  w.leases,
		Prepared: w.bucket,
	}, nil)
	w.handler = func(t *testing.T, m account.ExportMessage) pushtest.Outcome {
		t.Helper()
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return pushtest.Deliver(t, h, bus.Message{ID: "m1", Data: b, Attributes: map[string]string{"kind": account.ExportKind}}, "account-export")
	}
	return w
}

// pending writes the marker of an export of alice, as Account does before
// it publishes the message.
func (w *world) pending(t *testing.T, deadline time.Time) account.ExportMessage {
	t.Helper()
	e := account.NewPreparedExport("alice", time.Now())
	if err := w.bucket.Write(t.Context(), e.Pending(), "text/plain").Close(); err != nil {
		t.Fatal(err)
	}
	return account.ExportMessage{UserID: "alice", Export: e, Lease: "lease-1", Deadline: deadline}
}

func (w *world) names(t *testing.T) []string {
	t.Helper()
	objs, err := w.bucket.List(t.Context(), account.PreparedDir("alice"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Name[strings.LastIndex(o.Name, "."):])
	}
	return out
}

// TestPrepareExportWritesItAgainAfterAFailure: a delivery whose store fails
// midway is redelivered and leaves no document, only the marker; the next
// delivery writes the whole document, deletes the marker and ends the
// user's lease.
func TestPrepareExportWritesItAgainAfterAFailure(t *testing.T) {
	w := newWorld(t, 1500)
	m := w.pending(t, time.Now().Add(10*time.Minute))

	w.store.failHistory = true
	if got := w.handler(t, m); got != pushtest.Retried {
		t.Fatalf("a store down: %v, want redelivered", got)
	}
	if got := w.names(t); len(got) != 1 || got[0] != account.PendingSuffix || len(w.leases.ended) != 0 {
		t.Fatalf("after the failure: objects %v, leases ended %v; want the marker alone and the lease held", got, w.leases.ended)
	}

	w.store.failHistory = false
	if got := w.handler(t, m); got != pushtest.Acked {
		t.Fatalf("redelivered: %v, want acknowledged", got)
	}
	if got := w.names(t); len(got) != 1 || got[0] != account.DocumentSuffix {
		t.Fatalf("after the redelivery: objects %v; want the document alone", got)
	}
	if len(w.leases.ended) != 1 || w.leases.ended[0] != "alice/lease-1" {
		t.Errorf("leases ended %v; want alice's", w.leases.ended)
	}
	r, err := w.bucket.Read(t.Context(), m.Export.Document())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var doc struct {
		Reactions, History []json.RawMessage
	}
	if b, _ := io.ReadAll(r); json.Unmarshal(b, &doc) != nil || len(doc.Reactions) != 1500 || len(doc.History) != 1500 {
		t.Errorf("the document holds %d reactions and %d entries; want 1500 of each", len(doc.Reactions), len(doc.History))
	}
}

// TestPrepareExportWritesNothingUnwanted: a message for an export whose
// marker is gone (withdrawn by the account's erasure), or past its
// deadline, is acknowledged and reads and writes nothing; one whose
// account's erasure started while it was written leaves no document.
func TestPrepareExportWritesNothingUnwanted(t *testing.T) {
	t.Run("withdrawn", func(t *testing.T) {
		w := newWorld(t, 10)
		m := w.pending(t, time.Now().Add(10*time.Minute))
		if err := w.bucket.Delete(t.Context(), m.Export.Pending()); err != nil {
			t.Fatal(err)
		}
		if got := w.handler(t, m); got != pushtest.Acked {
			t.Fatalf("%v, want acknowledged", got)
		}
		if got := w.names(t); len(got) != 0 || w.store.reads != 0 {
			t.Errorf("objects %v, %d reads; want nothing", got, w.store.reads)
		}
	})
	t.Run("erasure under way", func(t *testing.T) {
		w := newWorld(t, 10)
		m := w.pending(t, time.Now().Add(10*time.Minute))
		w.store.erasing = true
		if got := w.handler(t, m); got != pushtest.Acked {
			t.Fatalf("%v, want acknowledged", got)
		}
		if got := w.names(t); len(got) != 1 || got[0] != account.PendingSuffix {
			t.Errorf("objects %v; want no document", got)
		}
	})
	t.Run("past its deadline", func(t *testing.T) {
		w := newWorld(t, 10)
		m := w.pending(t, time.Now().Add(-time.Second))
		if got := w.handler(t, m); got != pushtest.Acked {
			t.Fatalf("%v, want acknowledged", got)
		}
		if got := w.names(t); len(got) != 1 || got[0] != account.PendingSuffix || w.store.reads != 0 {
			t.Errorf("objects %v, %d reads; want the marker alone, nothing read", got, w.store.reads)
		}
	})
}

// TestPrepareExportRefusesPoison: a message that is no export, or names
// another user's export, is refused (dead-lettered), never retried.
func TestPrepareExportRefusesPoison(t *testing.T) {
	w := newWorld(t, 10)
	bob := account.NewPreparedExport("bob", time.Now())
	for name, m := range map[string]account.ExportMessage{
		"another user's export": {UserID: "alice", Export: bob, Deadline: time.Now().Add(time.Minute)},
		"no deadline":           {UserID: "alice", Export: account.NewPreparedExport("alice", time.Now())},
		"no user":               {Export: bob, Deadline: time.Now().Add(time.Minute)},
	} {
		if got := w.handler(t, m); got != pushtest.Refused {
			t.Errorf("%s: %v, want refused as poison", name, got)
		}
	}
	if w.store.reads != 0 {
		t.Errorf("%d reads for poison messages", w.store.reads)
	}
}

// TestPrepareExportWithinItsAckDeadline: a delivery ends before its
// subscription's ack deadline, so Pub/Sub never delivers it again while it
// runs.
func TestPrepareExportWithinItsAckDeadline(t *testing.T) {
	top := topology.MustLoad()
	found := false
	for _, tp := range top.PubSub.Topics {
		for _, s := range tp.Subscriptions {
			if s.Function != "PrepareExport" {
				continue
			}
			found = true
			if ack := time.Duration(s.AckDeadline(top.PubSub.Delivery)) * time.Second; prepareexportfn.MaxRun >= ack {
				t.Errorf("subscription %s: ack deadline %v, a delivery runs up to %v", s.Name, ack, prepareexportfn.MaxRun)
			}
		}
	}
	if !found {
		t.Fatal("no subscription pushes to PrepareExport")
	}
}
