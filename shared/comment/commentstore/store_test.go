package commentstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/internal/pushtest"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/foldstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

type world struct {
	db     *spannerdb.DB
	store  *commentstore.Store
	outbox *outboxstore.Store
	reads  *countstore.Store
	folds  *foldstore.Store
	recon  *reconcilestore.Store
	pub    *pushtest.Events
	writer *commentstore.Writer
}

func newWorld(t *testing.T, limit int) *world {
	t.Helper()
	cfg := emulatortest.New(t)
	db := emulatortest.Spanner(t, cfg)
	w := &world{db: db, pub: &pushtest.Events{}}
	w.store = commentstore.New(db, limit)
	w.outbox, w.reads, w.recon = outboxstore.New(db), countstore.New(db), reconcilestore.New(db, reconcilestore.Options{})
	w.folds = foldstore.New(db, foldstore.Options{RollupInterval: time.Second})
	w.writer = commentstore.NewWriter(w.store, w.pub, commentstore.WriterOptions{Batched: true, MaxInFlight: 1})
	return w
}

func (w *world) post(t *testing.T, user, video, parent, text string) comment.Comment {
	t.Helper()
	res, err := w.writer.Post(context.Background(), commentstore.CreateRequest{UserID: user, VideoID: video, ParentID: parent, Text: text})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("post %s on %s (parent %q): %v", user, video, parent, err)
	}
	return res.Comment
}

// deliver applies the published messages as the consumer would.
func (w *world) deliver(t *testing.T) {
	t.Helper()
	for _, m := range w.pub.Take() {
		if _, err := w.outbox.Apply(context.Background(), m); err != nil {
			t.Fatalf("apply: %v", err)
		}
	}
}

// counts reads as GET /v1/counts does (anonymous when viewer is "").
func (w *world) counts(t *testing.T, viewer string, ids ...string) map[string]counter.Values {
	t.Helper()
	var v *countstore.Viewer
	if viewer != "" {
		v = &countstore.Viewer{UserID: viewer}
	}
	c, err := w.reads.Counts(context.Background(), ids, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	for id, val := range c.Values {
		if val.Comments < 0 || val.Threads < 0 || val.Replies < 0 {
			t.Fatalf("negative count read for %s: %+v", id, val)
		}
	}
	return c.Values
}

// truth recounts ids with the reconciliation source, at one timestamp.
func (w *world) truth(t *testing.T, ids ...string) map[string]counter.Values {
	t.Helper()
	var got map[string]counter.Values
	err := w.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) (err error) {
		got, err = commentstore.Source{}.Truth(ctx, tx, ids)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]counter.Values{}
	for _, id := range ids {
		out[id] = got[id]
	}
	return out
}

// exact checks that counted + pending equals the truth for ids, field by
// field on comments, threads and replies: nothing lost, nothing counted
// twice.
func (w *world) exact(t *testing.T, ids ...string) {
	t.Helper()
	counted, pending, err := w.reads.Totals(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	truth := w.truth(t, ids...)
	fields := []counter.Field{counter.Comments, counter.Threads, counter.Replies}
	for _, id := range ids {
		got := counted[id].Plus(pending[id]).Only(fields)
		if got != truth[id] {
			t.Errorf("%s: counted %+v + pending %+v != truth %+v", id, counted[id].Only(fields), pending[id].Only(fields), truth[id])
		}
	}
	// The tallies reconciliation reads are the recount of the comments.
	var recount map[string]counter.Values
	err = w.db.InSnapshot(context.Background(), func(ctx context.Context, tx *spanner.ReadOnlyTransaction) (err error) {
		recount, err = commentstore.Recount(ctx, tx, ids)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if recount[id] != truth[id] {
			t.Errorf("%s: tallies %+v, recount of the comments %+v", id, truth[id], recount[id])
		}
	}
}

func commentsOf(v counter.Values) counter.Values {
	return counter.Values{Comments: v.Comments, Threads: v.Threads, Replies: v.Replies}
}

func TestPostListAndCount(t *testing.T) {
	w := newWorld(t, 0)
	var tops []comment.Comment
	for i := 0; i < 5; i++ {
		tops = append(tops, w.post(t, fmt.Sprintf("u%d", i), "vid", "", fmt.Sprintf("comment %d", i)))
	}
	var replies []comment.Comment
	for i := 0; i < 3; i++ {
		replies = append(replies, w.post(t, "replier", "vid", tops[0].ID, fmt.Sprintf("reply %d", i)))
	}
	w.post(t, "other", "vid2", "", "elsewhere")
	for _, c := range append(tops, replies...) {
		if c.ID == "" || c.CreateTime.IsZero() || c.Status != comment.Visible || c.VideoID != "vid" {
			t.Fatalf("posted comment %+v", c)
		}
	}
	w.exact(t, "vid", "vid2", tops[0].ID)
	w.deliver(t)
	got := w.counts(t, "", "vid", "vid2", tops[0].ID, tops[1].ID)
	want := map[string]counter.Values{"vid": {Comments: 8, Threads: 5}, "vid2": {Comments: 1, Threads: 1}, tops[0].ID: {Replies: 3}, tops[1].ID: {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	// Newest first, two a page.
	var listed []string
	var after *comment.Cursor
	for pages := 0; ; pages++ {
		p, err := w.store.ListVideo(context.Background(), "vid", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Comments {
			if c.IsReply() {
				t.Errorf("reply %s in the top-level listing", c.ID)
			}
			listed = append(listed, c.ID)
		}
		if p.Next == nil {
			if pages != 2 {
				t.Errorf("%d pages, want 3", pages+1)
			}
			break
		}
		after = p.Next
	}
	var wantOrder []string
	sorted := append([]comment.Comment(nil), tops...)
	sort.Slice(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if !a.CreateTime.Equal(b.CreateTime) {
			return a.CreateTime.After(b.CreateTime)
		}
		return a.ID > b.ID
	})
	for _, c := range sorted {
		wantOrder = append(wantOrder, c.ID)
	}
	if diff := cmp.Diff(wantOrder, listed); diff != "" {
		t.Errorf("top-level listing order (-want +got):\n%s", diff)
	}

	// Replies oldest first.
	p, err := w.store.ListReplies(context.Background(), tops[0].ID, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var rs []string
	for _, c := range p.Comments {
		rs = append(rs, c.Text)
	}
	if diff := cmp.Diff([]string{"reply 0", "reply 1", "reply 2"}, rs); diff != "" {
		t.Errorf("replies (-want +got):\n%s", diff)
	}
	p, err = w.store.ListReplies(context.Background(), replies[0].ID, nil, 10)
	if err != nil || len(p.Comments) != 0 {
		t.Errorf("replies of a reply: %+v, %v", p, err)
	}
	if _, err := w.store.ListReplies(context.Background(), "nope", nil, 10); !errors.Is(err, commentstore.ErrNotFound) {
		t.Errorf("replies of an unknown comment: %v", err)
	}
	got1, err := w.store.Get(context.Background(), replies[1].ID)
	if err != nil || got1.Text != "reply 1" || got1.ParentID != tops[0].ID || got1.AuthorID != "replier" {
		t.Errorf("Get = %+v, %v", got1, err)
	}
}

func TestReplyRules(t *testing.T) {
	w := newWorld(t, 0)
	top := w.post(t, "a", "vid", "", "top")
	reply := w.post(t, "b", "vid", top.ID, "reply")
	gone := w.post(t, "a", "vid", "", "to be deleted")
	if _, err := w.writer.Delete(context.Background(), commentstore.Actor{UserID: "a"}, gone.ID); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name          string
		video, parent string
		want          error
	}{
		{"unknown parent", "vid", "nope", comment.ErrParentNotFound},
		{"deleted parent", "vid", gone.ID, comment.ErrParentNotFound},
		{"reply to a reply", "vid", reply.ID, comment.ErrParentIsReply},
		{"parent of another video", "vid2", top.ID, comment.ErrParentElsewhere},
	}
	for _, c := range cases {
		res, err := w.writer.Post(context.Background(), commentstore.CreateRequest{UserID: "c", VideoID: c.video, ParentID: c.parent, Text: "x"})
		if err != nil || !errors.Is(res.Err, c.want) {
			t.Errorf("%s: %v, %v; want %v", c.name, err, res.Err, c.want)
		}
	}
	w.exact(t, "vid", "vid2", top.ID, gone.ID)
}

func TestIdempotencyKey(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	req := commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: "hello", IdempotencyKey: "key-1"}
	first, err := w.writer.Post(ctx, req)
	if err != nil || first.Err != nil || first.Replayed {
		t.Fatalf("first post: %+v, %v", first, err)
	}
	again, err := w.writer.Post(ctx, req)
	if err != nil || again.Err != nil || !again.Replayed {
		t.Fatalf("retry: %+v, %v", again, err)
	}
	if diff := cmp.Diff(first.Comment, again.Comment); diff != "" {
		t.Errorf("the retry answers another comment (-first +retry):\n%s", diff)
	}
	if again.Event != nil {
		t.Error("the retry emits a counter event")
	}
	// Another user's same key is another request.
	bob, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: "bob", VideoID: "vid", Text: "hello", IdempotencyKey: "key-1"})
	if err != nil || bob.Err != nil || bob.Replayed || bob.Comment.ID == first.Comment.ID {
		t.Fatalf("bob's post: %+v, %v", bob, err)
	}
	// The same key for another comment is refused.
	other := req
	other.Text = "something else"
	res, err := w.writer.Post(ctx, other)
	if err != nil || !errors.Is(res.Err, commentstore.ErrKeyReused) {
		t.Errorf("key reused for another text: %+v, %v", res, err)
	}
	// Concurrent retries of one request (they share a batch or not): one comment.
	req2 := commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: "burst", IdempotencyKey: "key-2"}
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := w.writer.Post(ctx, req2)
			if err == nil {
				err = r.Err
			}
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = r.Comment.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("concurrent retries created several comments: %v", ids)
		}
	}
	w.deliver(t)
	if got := w.counts(t, "", "vid")["vid"].Comments; got != 3 {
		t.Errorf("vid counts %d comments, want 3 (alice's two keys and bob's)", got)
	}
	w.exact(t, "vid")
	// Retries after the count was applied still count once.
	if r, err := w.writer.Post(ctx, req); err != nil || !r.Replayed {
		t.Fatalf("late retry: %+v, %v", r, err)
	}
	w.deliver(t)
	if got := w.counts(t, "alice", "vid")["vid"].Comments; got != 3 {
		t.Errorf("vid counts %d comments after a late retry, want 3", got)
	}
}

// A keyed post writes no row for its key: its comment's id is the key's
// record (comment.KeyedID). A key recorded in CommentRequests, as posts
// recorded them before, still answers its comment.
func TestIdempotencyKeyWritesNoRowOfItsOwn(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	before := otelcount.Global().Spanner()
	const n = 5
	for i := range n {
		req := commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: fmt.Sprint("hello ", i), IdempotencyKey: fmt.Sprint("k", i)}
		res, err := w.writer.Post(ctx, req)
		if err != nil || res.Err != nil || res.Comment.ID != comment.KeyedID("alice", req.IdempotencyKey) {
			t.Fatalf("post %d: %+v, %v", i, res, err)
		}
	}
	d := otelcount.Global().Spanner().Minus(before)
	if d.WritesByTable["Comments"] != n || d.WritesByTable["CommentRequests"] != 0 {
		t.Errorf("row writes by table %v, want %d Comments and no CommentRequests", d.WritesByTable, n)
	}

	old := w.post(t, "bob", "vid", "", "from before")
	_, err := w.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{spanner.Insert("CommentRequests",
			[]string{"UserId", "IdempotencyKey", "CommentId", "RequestHash", "CreateTime"},
			[]any{"bob", "old-key", old.ID, comment.RequestHash("vid", "", "from before"), spanner.CommitTimestamp})})
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: "bob", VideoID: "vid", Text: "from before", IdempotencyKey: "old-key"})
	if err != nil || res.Err != nil || !res.Replayed || res.Comment.ID != old.ID {
		t.Errorf("retry of a key recorded in CommentRequests: %+v, %v; want %s replayed", res, err, old.ID)
	}
	w.deliver(t)
	if got := w.counts(t, "", "vid")["vid"].Comments; got != n+1 {
		t.Errorf("vid counts %d comments, want %d", got, n+1)
	}
	w.exact(t, "vid")
}

func TestRateLimit(t *testing.T) {
	w := newWorld(t, 6) // 6 a minute: 3 at once, then one every 15 s
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		w.post(t, "alice", "vid", "", fmt.Sprint(i))
	}
	res, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: "one too many"})
	var limited *errs.RateLimitedError
	if err != nil || !errors.As(res.Err, &limited) || limited.RetryAfter <= 0 || limited.RetryAfter > time.Minute {
		t.Fatalf("4th post at once: %+v, %v", res, err)
	}
	// Other users have their own allowance.
	w.post(t, "bob", "vid", "", "fine")
	w.deliver(t)
	if got := w.counts(t, "", "vid")["vid"].Comments; got != 4 {
		t.Errorf("%d comments, want 4: a refused post must not count", got)
	}
}

func TestRateLimitDoesNotChargeRetries(t *testing.T) {
	w := newWorld(t, 4) // 2 at once, then one every 20 s
	ctx := context.Background()
	req := commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: "once", IdempotencyKey: "k"}
	for i := 0; i < 5; i++ {
		res, err := w.writer.Post(ctx, req)
		if err != nil || res.Err != nil {
			t.Fatalf("attempt %d: %+v, %v", i, res, err)
		}
	}
	w.post(t, "alice", "vid", "", "second comment: still allowed")
}

func TestDeleteRules(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	c := w.post(t, "alice", "vid", "", "mine")
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "alice"}, "unknown"); !errors.Is(err, commentstore.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "bob"}, c.ID); !errors.Is(err, commentstore.ErrPermissionDenied) {
		t.Errorf("someone else: %v", err)
	}
	w.deliver(t)
	res, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "alice"}, c.ID)
	if err != nil || res.Updated != 1 || len(res.Events) != 1 {
		t.Fatalf("author's delete: %+v, %v", res, err)
	}
	// Read-your-own-writes: alice sees the removal before it is applied.
	if got := w.counts(t, "alice", "vid")["vid"].Comments; got != 0 {
		t.Errorf("alice reads %d comments after her delete, want 0", got)
	}
	if got := w.counts(t, "", "vid")["vid"].Comments; got != 1 {
		t.Errorf("anonymous reads %d before the delete is applied, want 1", got)
	}
	res, err = w.writer.Delete(ctx, commentstore.Actor{UserID: "alice"}, c.ID)
	if err != nil || res.Updated != 0 || len(res.Events) != 0 {
		t.Errorf("second delete: %+v, %v; want no change and no event", res, err)
	}
	// A moderator may delete anyone's comment.
	d := w.post(t, "carol", "vid", "", "rude")
	res, err = w.writer.Delete(ctx, commentstore.Actor{UserID: "mod", Moderator: true}, d.ID)
	if err != nil || res.Updated != 1 {
		t.Errorf("moderator's delete: %+v, %v", res, err)
	}
	got, err := w.store.Get(ctx, d.ID)
	if err != nil || got.Status != comment.Deleted {
		t.Errorf("deleted comment reads %+v, %v", got, err)
	}
	w.deliver(t)
	if got := w.counts(t, "alice", "vid")["vid"].Comments; got != 0 {
		t.Errorf("%d comments after both deletes applied, want 0", got)
	}
	w.exact(t, "vid")
	p, err := w.store.ListVideo(ctx, "vid", nil, 10)
	if err != nil || len(p.Comments) != 0 {
		t.Errorf("deleted comments listed: %+v, %v", p, err)
	}
}

func TestParentDeleteWithReplies(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	parent := w.post(t, "alice", "vid", "", "parent")
	sibling := w.post(t, "alice", "vid", "", "sibling")
	var replies []comment.Comment
	for i := 0; i < 4; i++ {
		replies = append(replies, w.post(t, fmt.Sprintf("r%d", i), "vid", parent.ID, fmt.Sprint(i)))
	}
	w.post(t, "x", "vid", sibling.ID, "reply to the sibling")
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "r0"}, replies[0].ID); err != nil {
		t.Fatal(err)
	}
	w.deliver(t)
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 6, Threads: 2}, parent.ID: {Replies: 3}, sibling.ID: {Replies: 1}},
		w.counts(t, "", "vid", parent.ID, sibling.ID)); diff != "" {
		t.Fatalf("before the parent's delete (-want +got):\n%s", diff)
	}
	res, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "alice"}, parent.ID)
	if err != nil || res.Updated != 1 {
		t.Fatalf("delete parent: %+v, %v", res, err)
	}
	// One event, one delta per counter and field: the video loses the parent
	// and its 3 visible replies, and a thread; the parent's replies drop to
	// zero.
	var ds []counter.Delta
	for _, e := range res.Events {
		ds = append(ds, e.Deltas...)
	}
	wantDs := []counter.Delta{{Key: parent.ID, Field: counter.Replies, N: -3}, {Key: "vid", Field: counter.Comments, N: -4}, {Key: "vid", Field: counter.Threads, N: -1}}
	byKeyAndField := func(ds []counter.Delta) func(i, j int) bool {
		return func(i, j int) bool { return ds[i].Key+"/"+string(ds[i].Field) < ds[j].Key+"/"+string(ds[j].Field) }
	}
	sort.Slice(ds, byKeyAndField(ds))
	sort.Slice(wantDs, byKeyAndField(wantDs))
	if diff := cmp.Diff(wantDs, ds); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	if got := w.counts(t, "alice", "vid")["vid"]; got.Comments != 2 || got.Threads != 1 {
		t.Errorf("alice reads %d comments and %d threads right after deleting the thread, want 2 and 1", got.Comments, got.Threads)
	}
	w.deliver(t)
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 2, Threads: 1}, parent.ID: {}, sibling.ID: {Replies: 1}},
		w.counts(t, "", "vid", parent.ID, sibling.ID)); diff != "" {
		t.Errorf("after the parent's delete (-want +got):\n%s", diff)
	}
	// The thread is gone from the listings and closed to replies.
	if _, err := w.store.ListReplies(ctx, parent.ID, nil, 10); !errors.Is(err, commentstore.ErrNotFound) {
		t.Errorf("replies of a deleted parent: %v", err)
	}
	r, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: "late", VideoID: "vid", ParentID: parent.ID, Text: "too late"})
	if err != nil || !errors.Is(r.Err, comment.ErrParentNotFound) {
		t.Errorf("reply to a deleted parent: %+v, %v", r, err)
	}
	// Its replies can still be deleted or marked spam, without a count change.
	res, err = w.writer.Delete(ctx, commentstore.Actor{UserID: "r1"}, replies[1].ID)
	if err != nil || res.Updated != 1 || len(res.Events) != 0 {
		t.Errorf("delete a reply of a deleted parent: %+v, %v", res, err)
	}
	res, err = w.writer.MarkSpam(ctx, commentstore.Actor{UserID: "mod", Moderator: true}, []string{replies[2].ID, parent.ID}, "")
	if err != nil || res.Updated != 2 || len(res.Events) != 0 {
		t.Errorf("spam over the removed thread: %+v, %v", res, err)
	}
	w.deliver(t)
	w.exact(t, "vid", parent.ID, sibling.ID)
	if got := w.counts(t, "", "vid")["vid"]; got.Comments != 2 || got.Threads != 1 {
		t.Errorf("%d comments and %d threads, want 2 and 1", got.Comments, got.Threads)
	}
}

// TestDeleteRacingSpamSweep runs an author's delete and a moderator's sweep
// on the same comments at the same time, many times: each comment leaves the
// counts exactly once, whichever commits first.
func TestDeleteRacingSpamSweep(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	const rounds = 40
	var posted []comment.Comment
	for i := 0; i < rounds; i++ {
		top := w.post(t, fmt.Sprintf("author%d", i), "vid", "", "top")
		reply := w.post(t, "replier", "vid", top.ID, "reply")
		posted = append(posted, top, reply)
	}
	w.deliver(t)
	var wg sync.WaitGroup
	mod := commentstore.Actor{UserID: "mod", Moderator: true}
	for i := 0; i < rounds; i++ {
		top, reply := posted[2*i], posted[2*i+1]
		wg.Add(3)
		go func() {
			defer wg.Done()
			if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: top.AuthorID}, top.ID); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "replier"}, reply.ID); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := w.writer.MarkSpam(ctx, mod, []string{reply.ID, top.ID, reply.ID}, ""); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// Deliver every message twice, in reverse order: duplicates and reordering
	// change nothing.
	msgs := w.pub.Take()
	for i := len(msgs) - 1; i >= 0; i-- {
		for range 2 {
			if _, err := w.outbox.Apply(ctx, msgs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := []string{"vid"}
	for i := 0; i < rounds; i++ {
		keys = append(keys, posted[2*i].ID)
	}
	got := w.counts(t, "", keys...)
	for _, k := range keys {
		if !commentsOf(got[k]).IsZero() {
			t.Errorf("%s counts %+v after everything was removed, want 0", k, got[k])
		}
	}
	counted, pending, err := w.reads.Totals(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if v := counted[k].Plus(pending[k]); v.Comments != 0 || v.Replies != 0 {
			t.Errorf("%s: counted %+v pending %+v: a removal was counted twice or lost", k, counted[k], pending[k])
		}
	}
}

func TestSpamSweepWithDuplicatesAndDeletedIDs(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	var tops, replies []comment.Comment
	for i := 0; i < 6; i++ {
		tops = append(tops, w.post(t, "a", "vid", "", fmt.Sprint(i)))
	}
	for i := 0; i < 6; i++ {
		replies = append(replies, w.post(t, "b", "vid", tops[i%2].ID, fmt.Sprint(i)))
	}
	other := w.post(t, "c", "vid2", "", "other video")
	for _, id := range []string{tops[3].ID, replies[1].ID} {
		if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "mod", Moderator: true}, id); err != nil {
			t.Fatal(err)
		}
	}
	w.deliver(t)
	// tops[0] (with replies 0, 2, 4), tops[3] already deleted, replies[1]
	// already deleted, replies[3] (parent tops[1] stays), replies[2] (also
	// under tops[0]), the other video's comment, unknown ids, and repeats.
	sweep := []string{tops[0].ID, tops[3].ID, replies[1].ID, replies[3].ID, replies[2].ID, other.ID,
		"unknown1", tops[0].ID, replies[3].ID, "unknown2", other.ID}
	mod := commentstore.Actor{UserID: "mod", Moderator: true}
	res, err := w.writer.MarkSpam(ctx, mod, sweep, "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Updated != 6 {
		t.Errorf("updated %d, want 6 (4 visible and 2 deleted comments become spam)", res.Updated)
	}
	// One delta per counter and field touched: vid and vid2 (comments and
	// threads), tops[0] (replies), tops[1] (replies).
	perCounter := map[string]int{}
	for _, e := range res.Events {
		for _, d := range e.Deltas {
			perCounter[d.Key+"/"+string(d.Field)]++
		}
	}
	wantPer := map[string]int{"vid/comments": 1, "vid/threads": 1, "vid2/comments": 1, "vid2/threads": 1, tops[0].ID + "/replies": 1, tops[1].ID + "/replies": 1}
	if diff := cmp.Diff(wantPer, perCounter); diff != "" {
		t.Errorf("deltas per counter (-want +got):\n%s", diff)
	}
	again, err := w.writer.MarkSpam(ctx, mod, sweep, "")
	if err != nil || again.Updated != 0 || len(again.Events) != 0 {
		t.Errorf("the same sweep again: %+v, %v; want nothing", again, err)
	}
	w.deliver(t)
	// Left: tops 1, 2, 4, 5 and replies 5 (under tops[1]); replies 3 gone.
	want := map[string]counter.Values{"vid": {Comments: 5, Threads: 4}, "vid2": {}, tops[0].ID: {}, tops[1].ID: {Replies: 1}}
	if diff := cmp.Diff(want, w.counts(t, "", "vid", "vid2", tops[0].ID, tops[1].ID)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	w.exact(t, "vid", "vid2", tops[0].ID, tops[1].ID)
	for _, id := range []string{tops[0].ID, tops[3].ID, replies[1].ID, other.ID} {
		c, err := w.store.Get(ctx, id)
		if err != nil || c.Status != comment.Spam {
			t.Errorf("%s after the sweep: %+v, %v", id, c, err)
		}
	}
	if _, err := w.writer.MarkSpam(ctx, mod, make([]string, comment.MaxRemoveBatch+1), ""); err == nil {
		t.Error("a sweep over the batch limit was accepted")
	}
}

// TestLargeSpamSweep sweeps 10,000 comments of one video in calls of 1,000:
// the count lands exactly on the truth, one delta per counter and field per
// call.
func TestLargeSpamSweep(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	// A sweep of several full calls; the 10,000-comment sweep runs in
	// cmd/bench -only comments (make bench), which also checks the final count.
	const total, spam, batch = 3500, 3000, 500
	var ids []string
	for len(ids) < total {
		reqs := make([]commentstore.CreateRequest, batch)
		for i := range reqs {
			reqs[i] = commentstore.CreateRequest{UserID: fmt.Sprintf("bot%d", len(ids)+i), VideoID: "viral", Text: "buy now"}
		}
		res, err := w.store.CreateMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		var evs []events.Event
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			ids = append(ids, r.Comment.ID)
			evs = append(evs, *r.Event)
		}
		if _, err := w.outbox.Apply(ctx, evs); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.counts(t, "", "viral")["viral"].Comments; got != total {
		t.Fatalf("%d comments before the sweep, want %d", got, total)
	}
	mod := commentstore.Actor{UserID: "mod", Moderator: true}
	for i := 0; i < spam; i += comment.MaxRemoveBatch {
		res, err := w.writer.MarkSpam(ctx, mod, ids[i:i+comment.MaxRemoveBatch], "")
		if err != nil {
			t.Fatal(err)
		}
		want := []counter.Delta{{Key: "viral", Field: counter.Comments, N: -comment.MaxRemoveBatch}, {Key: "viral", Field: counter.Threads, N: -comment.MaxRemoveBatch}}
		if res.Updated != comment.MaxRemoveBatch || len(res.Events) != 1 || !slices.Equal(res.Events[0].Deltas, want) {
			t.Fatalf("sweep call %d: updated %d, events %+v; want one delta of -1000 comments and one of -1000 threads", i/comment.MaxRemoveBatch, res.Updated, res.Events)
		}
	}
	w.deliver(t)
	if got := w.counts(t, "", "viral")["viral"]; got.Comments != total-spam || got.Threads != total-spam {
		t.Errorf("%d comments and %d threads after the sweep, want exactly %d", got.Comments, got.Threads, total-spam)
	}
	w.exact(t, "viral")
}

// TestCountsNeverNegative delivers removals before the posts they remove
// (Pub/Sub does not order messages): the counter dips below zero inside,
// but no read ever shows a negative count.
func TestCountsNeverNegative(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	top := w.post(t, "alice", "vid", "", "top")
	reply := w.post(t, "bob", "vid", top.ID, "reply")
	posts := w.pub.Take()
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "alice"}, top.ID); err != nil {
		t.Fatal(err)
	}
	removals := w.pub.Take()
	for _, m := range removals {
		if _, err := w.outbox.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for _, viewer := range []string{"", "alice", "bob"} {
		got := w.counts(t, viewer, "vid", top.ID) // fails on any negative value
		if got["vid"].Comments != 0 || got[top.ID].Replies != 0 {
			t.Errorf("viewer %q: %+v, want zeros", viewer, got)
		}
	}
	counted, _, err := w.reads.Totals(ctx, []string{"vid"})
	if err != nil {
		t.Fatal(err)
	}
	if counted["vid"].Comments >= 0 {
		t.Errorf("counted %+v: this test means to apply the removal first (the dip below zero)", counted["vid"])
	}
	for _, m := range posts {
		if _, err := w.outbox.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got := w.counts(t, "", "vid", top.ID, reply.ID)
	if !commentsOf(got["vid"]).IsZero() || !commentsOf(got[top.ID]).IsZero() {
		t.Errorf("after all deliveries: %+v, want zeros", got)
	}
	w.exact(t, "vid", top.ID)
}

// TestReadYourOwnWrites: the author's next read includes their comment
// exactly once, before and after the consumer applies it.
func TestReadYourOwnWrites(t *testing.T) {
	w := newWorld(t, 0)
	top := w.post(t, "alice", "vid", "", "first")
	reply := w.post(t, "alice", "vid", top.ID, "and a reply")
	want := map[string]counter.Values{"vid": {Comments: 2, Threads: 1}, top.ID: {Replies: 1}}
	if diff := cmp.Diff(want, w.counts(t, "alice", "vid", top.ID)); diff != "" {
		t.Errorf("alice before apply (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {}, top.ID: {}}, w.counts(t, "bob", "vid", top.ID)); diff != "" {
		t.Errorf("bob before apply (-want +got):\n%s", diff)
	}
	w.deliver(t)
	for _, viewer := range []string{"alice", "bob", ""} {
		if diff := cmp.Diff(want, w.counts(t, viewer, "vid", top.ID)); diff != "" {
			t.Errorf("%q after apply (-want +got):\n%s", viewer, diff)
		}
	}
	if _, err := w.writer.Delete(context.Background(), commentstore.Actor{UserID: "alice"}, reply.ID); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 1, Threads: 1}, top.ID: {}}, w.counts(t, "alice", "vid", top.ID)); diff != "" {
		t.Errorf("alice after deleting her reply (-want +got):\n%s", diff)
	}
}

type failing struct{}

func (failing) Publish(context.Context, []byte, map[string]string) (string, error) {
	return "", errors.New("pubsub is down")
}

// TestPublishFailureLeavesTheOutbox: when the event cannot be published the
// comment stands, the author counts it, and the relay finds its deltas.
func TestPublishFailureLeavesTheOutbox(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	wr := commentstore.NewWriter(w.store, failing{}, commentstore.WriterOptions{Batched: true, MaxInFlight: 1})
	res, err := wr.Post(ctx, commentstore.CreateRequest{UserID: "alice", VideoID: "vid", Text: "hi"})
	if err != nil || res.Err != nil {
		t.Fatalf("post: %+v, %v", res, err)
	}
	if got := w.counts(t, "alice", "vid")["vid"].Comments; got != 1 {
		t.Errorf("alice reads %d, want 1", got)
	}
	stale, err := w.outbox.Stale(ctx, -time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) != 1 || res.Event == nil || stale[0].ID != res.Event.ID {
		t.Fatalf("relay finds %+v", stale)
	}
	if _, err := w.outbox.Apply(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if got := w.counts(t, "", "vid")["vid"].Comments; got != 1 {
		t.Errorf("after the relay: %d, want 1", got)
	}
}

// TestConcurrentPostsOnAHotVideo: concurrent posts are group-committed and
// counted exactly once each.
func TestConcurrentPostsOnAHotVideo(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	const n = 300
	before := otelcount.Global().Spanner()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: fmt.Sprintf("u%d", i), VideoID: "hot", Text: "wow"})
			if err == nil {
				err = res.Err
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	commits := otelcount.Global().Spanner().Commits - before.Commits
	if commits >= n {
		t.Errorf("%d commits for %d posts: not group-committed", commits, n)
	}
	t.Logf("%d posts in %d commits", n, commits)
	// Each commit's outbox rows are one key range, and counting them
	// deletes it whole.
	before = otelcount.Global().Spanner()
	w.deliver(t)
	if deletes := otelcount.Global().Spanner().Minus(before).WritesByTable["PendingDeltas"]; deletes > commits {
		t.Errorf("counting %d posts of %d commits deleted %d outbox rows or ranges, want at most one a commit", n, commits, deletes)
	}
	if got := w.counts(t, "", "hot")["hot"].Comments; got != n {
		t.Errorf("%d comments counted, want %d", got, n)
	}
}

// TestReconcileRepairsDrift injects drift into the counters (as a lost or
// doubled event would), leaves other changes in flight, and checks that one
// reconciliation run repairs exactly the drift.
func TestReconcileRepairsDrift(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	top := w.post(t, "a", "vid", "", "top")
	for i := 0; i < 3; i++ {
		w.post(t, "b", "vid", top.ID, "reply")
	}
	second := w.post(t, "a", "vid2", "", "other")
	w.deliver(t)
	// Drift: +5 comments and -1 thread on vid, -2 replies on top, +1 comment
	// and +2 threads on a video without comments.
	drift := []events.Event{{ID: "drift-1", Kind: events.KindCounterDelta, Deltas: []counter.Delta{
		{Key: "vid", Field: counter.Comments, N: 5}, {Key: "vid", Field: counter.Threads, N: -1}, {Key: top.ID, Field: counter.Replies, N: -2},
		{Key: "ghost", Field: counter.Comments, N: 1}, {Key: "ghost", Field: counter.Threads, N: 2},
	}}}
	if _, err := w.outbox.Apply(ctx, drift); err != nil {
		t.Fatal(err)
	}
	// In flight: a post and a delete, committed but not applied.
	w.post(t, "c", "vid", top.ID, "late reply")
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "a"}, second.ID); err != nil {
		t.Fatal(err)
	}
	inFlight := w.pub.Take()

	rep, err := w.recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{commentstore.Source{}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]counter.Values{}
	for _, c := range rep.Corrections {
		got[c.Key] = c.Delta
	}
	want := map[string]counter.Values{"vid": {Comments: -5, Threads: 1}, top.ID: {Replies: 2}, "ghost": {Comments: -1, Threads: -2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("corrections (-want +got):\n%s", diff)
	}
	// A second run finds nothing to do, with the changes still in flight.
	rep, err = w.recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{commentstore.Source{}})
	if err != nil || rep.Corrected != 0 {
		t.Errorf("second run: %+v, %v", rep, err)
	}
	for _, m := range inFlight {
		if _, err := w.outbox.Apply(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	want2 := map[string]counter.Values{"vid": {Comments: 5, Threads: 1}, "vid2": {}, top.ID: {Replies: 4}, "ghost": {}}
	if diff := cmp.Diff(want2, w.counts(t, "", "vid", "vid2", top.ID, "ghost")); diff != "" {
		t.Errorf("counts after repair and delivery (-want +got):\n%s", diff)
	}
	w.exact(t, "vid", "vid2", top.ID, "ghost")

	// The hourly run finds drift on counters that moved.
	if _, err := w.outbox.Apply(ctx, []events.Event{{ID: "drift-2", Kind: events.KindCounterDelta,
		Deltas: []counter.Delta{{Key: "vid", Field: counter.Comments, N: -1}, {Key: "vid", Field: counter.Threads, N: 3}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = w.recon.Reconcile(ctx, reconcilestore.Recent, []reconcilestore.Source{commentstore.Source{}})
	if err != nil || rep.Corrected != 1 || len(rep.Corrections) != 1 || rep.Corrections[0].Delta != (counter.Values{Comments: 1, Threads: -3}) {
		t.Errorf("recent run: %+v, %v", rep, err)
	}
	w.exact(t, "vid")
}

// TestListRepliesBesideWrites reads a thread's replies while replies are being
// posted to it. The listing reads the parent and its replies at one timestamp;
// neither the reads nor the posts may fail (against the emulator a multi-use
// read-only transaction beside a read-write one breaks both unless they are
// serialised).
func TestListRepliesBesideWrites(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	parent := w.post(t, "author", "v", "", "first")
	const posts, readers = 100, 4
	var wg sync.WaitGroup
	for i := range posts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.writer.Post(ctx, commentstore.CreateRequest{UserID: fmt.Sprintf("u%d", i), VideoID: "v", ParentID: parent.ID, Text: "reply"})
			if err == nil {
				err = res.Err
			}
			if err != nil {
				t.Errorf("post: %v", err)
			}
		}()
	}
	stop := make(chan struct{})
	var reads sync.WaitGroup
	for range readers {
		reads.Add(1)
		go func() {
			defer reads.Done()
			last := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				page, err := w.store.ListReplies(ctx, parent.ID, nil, posts)
				if err != nil {
					t.Errorf("list replies: %v", err)
					return
				}
				if len(page.Comments) < last {
					t.Errorf("listing went back from %d to %d replies", last, len(page.Comments))
				}
				last = len(page.Comments)
			}
		}()
	}
	wg.Wait()
	close(stop)
	reads.Wait()
	page, err := w.store.ListReplies(ctx, parent.ID, nil, posts)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Comments) != posts {
		t.Errorf("%d replies listed, want %d", len(page.Comments), posts)
	}
}

// TestSourceKeysAfter pages through the keys the comments' source lists for
// reconciliation: videos with a visible comment and comments with a visible
// reply, in order, none twice, and not a video whose only comment is gone.
func TestSourceKeysAfter(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	want := map[string]bool{}
	for _, v := range []string{"v3", "v1", "v5", "v2"} {
		top := w.post(t, "a", v, "", "top")
		want[v] = true
		if v != "v2" {
			w.post(t, "b", v, top.ID, "reply")
			w.post(t, "c", v, top.ID, "reply")
			want[top.ID] = true
		}
	}
	gone := w.post(t, "a", "v4", "", "deleted")
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "a"}, gone.ID); err != nil {
		t.Fatal(err)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > len(want) {
			t.Fatalf("no end after %d pages: %v", pages, got)
		}
		var keys []string
		err := w.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) (err error) {
			keys, err = commentstore.Source{}.KeysAfter(ctx, tx, after, 2)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 2 {
			t.Fatalf("page of %d keys, limit 2: %v", len(keys), keys)
		}
		got = append(got, keys...)
		if len(keys) < 2 {
			break
		}
		after = keys[len(keys)-1]
	}
	wantKeys := make([]string, 0, len(want))
	for k := range want {
		wantKeys = append(wantKeys, k)
	}
	sort.Strings(wantKeys)
	if diff := cmp.Diff(wantKeys, got); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
}

// TestVideoListingAcrossBuckets pages through a video's comments, posted in
// group-committed batches (many share a commit timestamp) and so spread over
// the index's buckets, with page tokens, while more are posted between
// pages: the pages are the comments newest first in (CreateTime, CommentId)
// order, none twice, none missed, and a post after the first page appears in
// no later page.
func TestVideoListingAcrossBuckets(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	var all []comment.Comment
	for b := range 6 {
		var reqs []commentstore.CreateRequest
		for i := range 10 {
			reqs = append(reqs, commentstore.CreateRequest{UserID: fmt.Sprintf("u%d", i), VideoID: "viral", Text: fmt.Sprintf("c%d-%d", b, i)})
		}
		res, err := w.store.CreateMany(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			all = append(all, r.Comment)
		}
	}
	w.post(t, "x", "other", "", "elsewhere")
	var buckets int64
	err := w.db.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(DISTINCT ListBucket) FROM Comments WHERE VideoId = "viral"`}).Do(func(r *spanner.Row) error {
		return r.Columns(&buckets)
	})
	if err != nil {
		t.Fatal(err)
	}
	if buckets < 4 {
		t.Fatalf("60 comments in %d buckets; the test needs them spread", buckets)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if !a.CreateTime.Equal(b.CreateTime) {
			return a.CreateTime.After(b.CreateTime)
		}
		return a.ID > b.ID
	})
	tokens := comment.NewPageTokens("secret")
	listing := comment.VideoListing("viral")
	var got []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatal("no last page")
		}
		var after *comment.Cursor
		if token != "" {
			c, err := tokens.Decode(listing, token)
			if err != nil {
				t.Fatal(err)
			}
			after = &c
		}
		page, err := w.store.ListVideo(ctx, "viral", after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Comments) > 7 {
			t.Fatalf("page of %d", len(page.Comments))
		}
		for _, c := range page.Comments {
			got = append(got, c.ID)
		}
		if pages == 0 {
			// Newer than every cursor from here on: on no later page.
			w.post(t, "late", "viral", "", "posted while paging")
		}
		if page.Next == nil {
			break
		}
		token = tokens.Encode(listing, *page.Next)
	}
	var want []string
	for _, c := range all {
		want = append(want, c.ID)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listing across buckets (-want +got):\n%s", diff)
	}
}

// TestTallySpreadAndBackfill: a hot video's tally is spread over shards
// written by the posts; the backfill of a key sets its tally to the recount.
func TestTallySpreadAndBackfill(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	var top comment.Comment
	for i := range 40 {
		c := w.post(t, "a", "hot", "", fmt.Sprint(i))
		if i == 0 {
			top = c
		}
	}
	w.post(t, "b", "hot", top.ID, "reply")
	var shards int64
	err := w.db.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(*) FROM CommentTallies WHERE CounterKey = "hot"`}).Do(func(r *spanner.Row) error {
		return r.Columns(&shards)
	})
	if err != nil {
		t.Fatal(err)
	}
	if shards < 2 {
		t.Errorf("40 posts wrote %d tally shards of the hot video", shards)
	}
	w.exact(t, "hot", top.ID) // counted + pending = tallies = recount
	if got := w.truth(t, "hot", top.ID); got["hot"] != (counter.Values{Comments: 41, Threads: 40}) || got[top.ID] != (counter.Values{Replies: 1}) {
		t.Errorf("tallies %+v", got)
	}
	// A database whose comments predate the tallies: no tally rows at all
	// for hot, and for the top comment only shard rows without a base (a
	// tally written partly). Reconciliation's truth is the recount until a
	// tally starts; the next comment write starts hot's (recount + its own
	// change), BackfillTallies the top comment's; each exactly once.
	if _, err := w.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite([]*spanner.Mutation{
			spanner.Delete("CommentTallies", spanner.Key{"hot"}.AsPrefix()),
			spanner.Delete("CommentTallies", spanner.Key{top.ID, int64(-1)}),
		})
	}); err != nil {
		t.Fatal(err)
	}
	if got := w.truth(t, "hot", top.ID); got["hot"] != (counter.Values{Comments: 41, Threads: 40}) || got[top.ID] != (counter.Values{Replies: 1}) {
		t.Fatalf("without tallies, truth %+v, want the recount", got)
	}
	w.post(t, "c", "hot", "", "after")
	if err := w.store.BackfillTallies(ctx, []string{"hot", top.ID}); err != nil {
		t.Fatal(err)
	}
	if err := w.store.BackfillTallies(ctx, []string{top.ID}); err != nil { // again: a no-op
		t.Fatal(err)
	}
	w.exact(t, "hot", top.ID)
	var based int64
	err = w.db.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(*) FROM CommentTallies WHERE CounterKey IN UNNEST(@ids) AND Shard = -1`,
		Params: map[string]any{"ids": []string{"hot", top.ID}}}).Do(func(r *spanner.Row) error { return r.Columns(&based) })
	if err != nil {
		t.Fatal(err)
	}
	if got := w.truth(t, "hot", top.ID); based != 2 || got["hot"] != (counter.Values{Comments: 42, Threads: 41}) || got[top.ID] != (counter.Values{Replies: 1}) {
		t.Errorf("tallies started: %d base rows, %+v; want 2, hot 42 comments and 41 threads, top 1 reply", based, got)
	}
}

// TestTalliesStartTheirThreads: tallies written before they kept threads
// (base row, no threads base, Threads zero in every row) give threads from
// the recount until their threads start, which the next comment write does
// (recount + its own change) or BackfillTallies; each exactly once.
func TestTalliesStartTheirThreads(t *testing.T) {
	w := newWorld(t, 0)
	ctx := context.Background()
	var tops []comment.Comment
	for _, v := range []string{"old1", "old1", "old1", "old2", "old2"} {
		tops = append(tops, w.post(t, "a", v, "", "top"))
	}
	w.post(t, "b", "old1", tops[0].ID, "reply")
	w.deliver(t)
	// As the tallies were before threads: no threads base, no threads.
	if _, err := w.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		var ms []*spanner.Mutation
		err := tx.Query(ctx, spanner.Statement{SQL: `SELECT CounterKey, Shard FROM CommentTallies`}).Do(func(r *spanner.Row) error {
			var k string
			var shard int64
			if err := r.Columns(&k, &shard); err != nil {
				return err
			}
			if shard == -2 {
				ms = append(ms, spanner.Delete("CommentTallies", spanner.Key{k, shard}))
			} else {
				ms = append(ms, spanner.Update("CommentTallies", []string{"CounterKey", "Shard", "Threads"}, []any{k, shard, int64(0)}))
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tx.BufferWrite(ms)
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]counter.Values{"old1": {Comments: 4, Threads: 3}, "old2": {Comments: 2, Threads: 2}, tops[0].ID: {Replies: 1}}
	if diff := cmp.Diff(want, w.truth(t, "old1", "old2", tops[0].ID)); diff != "" {
		t.Fatalf("threads not started: truth (-want +got):\n%s", diff)
	}
	// old1: a write starts its threads; old2: the backfill; a removal too.
	w.post(t, "c", "old1", "", "after")
	if err := w.store.BackfillTallies(ctx, []string{"old2", tops[0].ID}); err != nil {
		t.Fatal(err)
	}
	if err := w.store.BackfillTallies(ctx, []string{"old2"}); err != nil { // again: a no-op
		t.Fatal(err)
	}
	if _, err := w.writer.Delete(ctx, commentstore.Actor{UserID: "a"}, tops[3].ID); err != nil {
		t.Fatal(err)
	}
	var started int64
	err := w.db.Single().Query(ctx, spanner.Statement{SQL: `SELECT COUNT(*) FROM CommentTallies WHERE Shard = -2`}).Do(func(r *spanner.Row) error {
		return r.Columns(&started)
	})
	if err != nil {
		t.Fatal(err)
	}
	if started != 3 {
		t.Errorf("%d threads base rows, want 3 (old1, old2, the top comment)", started)
	}
	want = map[string]counter.Values{"old1": {Comments: 5, Threads: 4}, "old2": {Comments: 1, Threads: 1}, tops[0].ID: {Replies: 1}}
	if diff := cmp.Diff(want, w.truth(t, "old1", "old2", tops[0].ID)); diff != "" {
		t.Errorf("threads started: truth (-want +got):\n%s", diff)
	}
	w.exact(t, "old1", "old2", tops[0].ID)
}
