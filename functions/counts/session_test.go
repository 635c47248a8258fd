package countsfn_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	countsfn "github.com/videngage/engagement/functions/counts"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/session"
)

// recordingStore records the queries of every OwnMany call.
type recordingStore struct {
	*fakeStore
	mu sync.Mutex
	qs []countstore.OwnQuery
}

func (r *recordingStore) OwnMany(ctx context.Context, qs []countstore.OwnQuery) ([]countstore.Own, error) {
	r.mu.Lock()
	r.qs = append(r.qs, qs...)
	r.mu.Unlock()
	return r.fakeStore.OwnMany(ctx, qs)
}

func (r *recordingStore) last() countstore.OwnQuery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.qs[len(r.qs)-1]
}

// TestSessionTokenReadTime: a signed-in read with a Session-Token asks the
// store for a read at the token's timestamp, or at a later one the instance
// holds public values of, or no older than the public counts may be; one
// without asks for a strong read; a token this service cannot have issued
// is 400.
func TestSessionTokenReadTime(t *testing.T) {
	f := &recordingStore{fakeStore: newFake()}
	e := serve(t, f, countsfn.Deps{MaxAge: 2 * time.Second, CacheTTL: time.Hour, MaxStaleness: time.Minute})
	auth := []string{"Authorization", "Bearer " + e.alice}
	read := func(ids, token string) countstore.OwnQuery {
		t.Helper()
		e.get("/v1/me/counts?ids="+ids, append(auth, session.Header, token)...).Want(t, 200, "GET")
		return f.last()
	}

	e.get("/v1/me/counts?ids=a", auth...).Want(t, 200, "GET")
	if q := f.last(); !q.At.IsZero() {
		t.Errorf("no token: read at %v, want strongly", q.At)
	}
	recent := time.Now().Add(-time.Second).Truncate(time.Microsecond)
	// Each read names an id the instance does not hold yet (a signed-in
	// read holds the ids it read).
	if q := read("c", session.Encode(recent)); !q.At.Equal(recent) {
		t.Errorf("token of %v: read at %v", recent, q.At)
	}
	if q := read("d", session.Encode(recent.Add(500*time.Millisecond))); !q.At.Equal(recent.Add(500 * time.Millisecond)) {
		t.Errorf("token just ahead of the clock: read at %v", q.At)
	}
	old := time.Now().Add(-time.Hour)
	before := time.Now()
	if q := read("e", session.Encode(old)); q.At.Before(before.Add(-time.Minute)) || q.At.After(time.Now().Add(-time.Minute)) {
		t.Errorf("token an hour old: read at %v, want a minute (MaxStaleness) before the read", q.At)
	}

	// The instance holds b's public value, read now: a token older than
	// that read is read at the held value's timestamp.
	e.get("/v1/counts?ids=b").Want(t, 200, "GET")
	q := read("b", session.Encode(recent))
	if len(q.Cached) != 1 || q.Since.IsZero() || !q.At.Equal(q.Since) {
		t.Errorf("token older than the held value: read at %v, held since %v (cached %v)", q.At, q.Since, q.Cached)
	}

	for _, tok := range []string{"garbage", session.Encode(recent) + "A", session.Encode(time.Now().Add(time.Minute))} {
		a := e.get("/v1/me/counts?ids=a", append(auth, session.Header, tok)...)
		apitest.CheckError(t, "token "+tok, a, 400, "INVALID_ARGUMENT", errs.InvalidSession)
		if !strings.Contains(string(a.Body), session.Header) {
			t.Errorf("token %q: %s", tok, a.Body)
		}
	}
	// Two tokens (two devices' writes) are refused, not read as the first.
	two := e.get("/v1/me/counts?ids=a", append(auth, session.Header, session.Encode(recent), session.Header, session.Encode(old))...)
	apitest.CheckError(t, "two tokens", two, 400, "INVALID_ARGUMENT", errs.RepeatedParameter)
}

// TestSessionTokenOlderThanTheLatestWrite runs the handler over the real
// store: alice likes v on one device, then w on another. With the first
// device's token she sees the state after her like of v, which does not
// hold her like of w yet; with the second's, or with none, both. The
// instance holds no public values, and public reads may be an hour stale,
// so each token is read at its own timestamp.
func TestSessionTokenOlderThanTheLatestWrite(t *testing.T) {
	cfg := emulatortest.New(t)
	ctx := context.Background()
	db := emulatortest.Spanner(t, cfg)
	outbox, folds, cs := outboxstore.New(db), foldstore.New(db, foldstore.Options{}), countstore.New(db)
	if _, err := outbox.Apply(ctx, []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: counter.Deltas("v", counter.Values{Likes: 5})}}); err != nil {
		t.Fatal(err)
	}
	if _, err := folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	e := serve(t, cs, countsfn.Deps{MaxAge: 2 * time.Second, MaxStaleness: time.Hour})
	like := func(id string) string {
		t.Helper()
		ev := events.Event{ID: "alice-like-" + id, Kind: events.KindCounterDelta, Outbox: true, Deltas: counter.Deltas(id, counter.Values{Likes: 1})}
		ts, err := db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			return tx.BufferWrite(append(outboxstore.Pending(ev, "alice"), spanner.InsertMap("Reactions", map[string]any{
				"UserId": "alice", "ContentId": id, "Reaction": "like", "Version": 1, "Generation": 1, "UpdateTime": spanner.CommitTimestamp,
			})))
		})
		if err != nil {
			t.Fatal(err)
		}
		return session.Encode(ts)
	}
	phone := like("v")
	laptop := like("w")

	sees := func(hdr ...string) string {
		t.Helper()
		var b countsfn.Body
		a := e.get("/v1/me/counts?ids=v,w", append([]string{"Authorization", "Bearer " + e.alice}, hdr...)...).Want(t, 200, "GET")
		if err := json.Unmarshal(a.Body, &b); err != nil {
			t.Fatal(err)
		}
		return strings.Join([]string{
			"v", b.Viewer.Reactions["v"].Reaction, itoa(b.Counts["v"].Likes),
			"w", b.Viewer.Reactions["w"].Reaction, itoa(b.Counts["w"].Likes),
		}, " ")
	}
	for _, c := range []struct {
		name string
		hdr  []string
		want string
	}{
		{"the phone's token, older than the laptop's like", []string{session.Header, phone}, "v like 6 w none 0"},
		{"the laptop's token", []string{session.Header, laptop}, "v like 6 w like 1"},
		{"no token", nil, "v like 6 w like 1"},
	} {
		if got := sees(c.hdr...); got != c.want {
			t.Errorf("%s: alice sees %q, want %q", c.name, got, c.want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
