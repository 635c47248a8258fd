package eraseaccountfn_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	eraseaccountfn "github.com/videngage/engagement/functions/eraseaccount"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// queue is a Publisher that keeps the messages for the test to deliver,
// and fails while fail is set.
type queue struct {
	mu   sync.Mutex
	msgs []bus.Message
	fail error
}

func (q *queue) Publish(_ context.Context, data []byte, attrs map[string]string) (string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.fail != nil {
		return "", q.fail
	}
	q.msgs = append(q.msgs, bus.Message{ID: "next", Data: data, Attributes: attrs})
	return "next", nil
}

func (q *queue) take() []bus.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.msgs
	q.msgs = nil
	return out
}

func message(t *testing.T, user string) bus.Message {
	t.Helper()
	b, err := account.Message{UserID: user}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return bus.Message{ID: "m-" + user, Data: b, Attributes: map[string]string{"kind": "account-erasure"}}
}

// TestEraseAccountFollowsItsMessages: with a budget of one step a
// delivery, each delivery acknowledges its message and publishes the next
// for the user until the erasure is done; a message for a user with no
// open erasure is acknowledged and changes nothing.
func TestEraseAccountFollowsItsMessages(t *testing.T) {
	ctx := context.Background()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	bt := emulatortest.Bigtable(t, cfg)
	fs := emulatortest.Firestore(t, cfg)
	records := accountstore.New(db)
	reactions := reactionstore.New(db)
	for _, item := range []string{"v1", "v2"} {
		res, err := reactions.SetMany(ctx, []reactionstore.SetRequest{{UserID: "ann", ContentID: item, To: reaction.Like}})
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := records.Request(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	counters, next := &queue{}, &queue{}
	fn := eraseaccountfn.New(&account.Eraser{
		Records:    records,
		Reactions:  reactions,
		Comments:   commentstore.New(db, 0),
		History:    historystore.New(bt),
		Settings:   historystore.NewSettings(fs),
		RateLimits: func(ctx context.Context, u string) error { return ratelimit.EraseUser(ctx, bt, u) },
		Exports:    accountstore.NewExports(fs, 0).EraseUser,
		Counters:   counters,
		Budget:     0,
	}, next, nil)

	pending := []bus.Message{message(t, "ann")}
	deliveries := 0
	for len(pending) > 0 {
		if deliveries++; deliveries > 100 {
			t.Fatal("still publishing after 100 deliveries")
		}
		if got := pushtest.Deliver(t, fn, pending[0], "erasure-apply"); got != pushtest.Acked {
			t.Fatalf("delivery %d: %v", deliveries, got)
		}
		pending = append(pending[1:], next.take()...)
		for _, m := range pending {
			if string(m.Data) != string(message(t, "ann").Data) || m.Attributes["kind"] != "account-erasure" {
				t.Fatalf("next message %q %v, want ann's erasure", m.Data, m.Attributes)
			}
		}
	}
	e, ok, err := records.Get(ctx, "ann")
	if err != nil || !ok || e.Open() {
		t.Fatalf("record after %d deliveries: %+v %v %v, want done", deliveries, e, ok, err)
	}
	// One step a delivery; the last delivery finds the erasure done.
	if int64(deliveries) != e.Steps+1 || e.Reactions != 2 {
		t.Errorf("%d deliveries for %+v, want one a step and the two reactions", deliveries, e)
	}
	if rs, err := reactions.ListByUser(ctx, "ann", "", 10); err != nil || len(rs) != 0 {
		t.Errorf("reactions left: %+v %v", rs, err)
	}

	// No open erasure: acknowledged, nothing published.
	for _, u := range []string{"ann", "bob"} {
		if got := pushtest.Deliver(t, fn, message(t, u), "erasure-apply"); got != pushtest.Acked {
			t.Errorf("message for %s with no open erasure: %v", u, got)
		}
	}
	if msgs := append(next.take(), counters.take()...); len(msgs) != 0 {
		t.Errorf("published %d messages for users with no open erasure", len(msgs))
	}
}

// fakeEraser answers Run with more and err.
type fakeEraser struct {
	more  bool
	err   error
	users []string
}

func (f *fakeEraser) Run(_ context.Context, userID string) (bool, error) {
	f.users = append(f.users, userID)
	return f.more, f.err
}

// TestEraseAccountOutcomes: a message that can never be worked is refused
// (dead-lettered) without a Run; a failed Run is redelivered; a Run with
// work left whose next message cannot be published is redelivered too, so
// the erasure is never left without a message.
func TestEraseAccountOutcomes(t *testing.T) {
	down := errs.Unavailable("spanner", errors.New("unavailable"))
	for _, tt := range []struct {
		name    string
		data    string
		eraser  fakeEraser
		nextErr error
		want    pushtest.Outcome
		next    int
	}{
		{name: "not JSON", data: `{`, want: pushtest.Refused},
		{name: "no user", data: `{"userId":""}`, want: pushtest.Refused},
		{name: "done", data: `{"userId":"ann"}`, want: pushtest.Acked},
		{name: "more", data: `{"userId":"ann"}`, eraser: fakeEraser{more: true}, want: pushtest.Acked, next: 1},
		{name: "run failed", data: `{"userId":"ann"}`, eraser: fakeEraser{err: down}, want: pushtest.Retried},
		{name: "next not published", data: `{"userId":"ann"}`, eraser: fakeEraser{more: true}, nextErr: down, want: pushtest.Retried},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := &queue{fail: tt.nextErr}
			fn := eraseaccountfn.New(&tt.eraser, next, nil)
			msg := bus.Message{ID: "m1", Data: []byte(tt.data), Attributes: map[string]string{"kind": "account-erasure"}}
			if got := pushtest.Deliver(t, fn, msg, "erasure-apply"); got != tt.want {
				t.Errorf("outcome %v, want %v", got, tt.want)
			}
			if got := len(next.take()); got != tt.next {
				t.Errorf("%d next messages, want %d", got, tt.next)
			}
			if tt.want == pushtest.Refused && len(tt.eraser.users) != 0 {
				t.Errorf("a poison message ran the erasure of %q", tt.eraser.users)
			}
		})
	}
}
