package commentstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/internal/otelcount"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/errs"
)

// clock is a settable time for the store.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func spamWorld(t *testing.T, limit int, rules comment.SpamRules, young int) (*world, *clock) {
	t.Helper()
	w := newWorld(t, limit)
	c := &clock{t: time.Now()}
	w.store.RefuseSpam(rules, young)
	w.store.SetClock(c.now)
	return w, c
}

func (w *world) try(user, video, text string, created time.Time) commentstore.CreateResult {
	res, err := w.writer.Post(context.Background(), commentstore.CreateRequest{UserID: user, VideoID: video, Text: text, AccountCreated: created})
	if err != nil {
		res.Err = err
	}
	return res
}

// recentTexts reads the stored state of user's recent texts.
func (w *world) recentTexts(t *testing.T, user string) []byte {
	t.Helper()
	row, err := w.db.Single().ReadRow(context.Background(), "CommentRateLimits", spanner.Key{user}, []string{"RecentTexts"})
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	if err := row.Columns(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDuplicateText(t *testing.T) {
	const window = 10 * time.Minute
	// 4 a minute: 2 at once, then one every 20 s.
	w, c := spamWorld(t, 4, comment.SpamRules{DuplicateWindow: window}, 0)
	w.post(t, "alice", "v1", "", "Buy followers at bit.ly/a")
	// The same text again, on another video, with another link and
	// spacing: refused, and neither posted nor charged to the limit.
	for _, text := range []string{"Buy followers at bit.ly/a", "buy  FOLLOWERS at https://spam.example/b"} {
		for _, video := range []string{"v1", "v2"} {
			if res := w.try("alice", video, text, time.Time{}); !errors.Is(res.Err, comment.ErrDuplicateText) {
				t.Fatalf("%q again on %s: %+v", text, video, res)
			}
		}
	}
	w.post(t, "alice", "v1", "", "something else") // the second of the burst
	// Another user's same text is theirs.
	w.post(t, "bob", "v2", "", "Buy followers at bit.ly/a")
	w.deliver(t)
	counts := w.counts(t, "", "v1", "v2")
	if counts["v1"].Comments != 2 || counts["v2"].Comments != 1 {
		t.Errorf("counts %+v, want v1 2 and v2 1: a refused duplicate must not count", counts)
	}
	w.exact(t, "v1", "v2")

	// Once the window has passed, the text is new again.
	c.add(window)
	w.post(t, "alice", "v2", "", "Buy followers at bit.ly/a")

	// Two of the same in one batch (one transaction): the second is refused.
	w, _ = spamWorld(t, 0, comment.SpamRules{DuplicateWindow: window}, 0)
	res, err := w.store.CreateMany(context.Background(), []commentstore.CreateRequest{
		{UserID: "carol", VideoID: "v1", Text: "twice"}, {UserID: "carol", VideoID: "v2", Text: "Twice"},
	})
	if err != nil || res[0].Err != nil || !errors.Is(res[1].Err, comment.ErrDuplicateText) {
		t.Fatalf("one batch: %+v, %v", res, err)
	}
}

func TestDuplicateTextRetryIsNoDuplicate(t *testing.T) {
	w, _ := spamWorld(t, 10, comment.SpamRules{DuplicateWindow: time.Hour}, 0)
	ctx := context.Background()
	req := commentstore.CreateRequest{UserID: "alice", VideoID: "v1", Text: "first!", IdempotencyKey: "k1"}
	first, err := w.writer.Post(ctx, req)
	if err != nil || first.Err != nil {
		t.Fatal(first, err)
	}
	again, err := w.writer.Post(ctx, req)
	if err != nil || again.Err != nil || !again.Replayed || again.Comment.ID != first.Comment.ID {
		t.Fatalf("the retry: %+v, %v; want the first comment %s replayed", again, err, first.Comment.ID)
	}
	// A new key with the same text is a new post of it: a duplicate.
	req.IdempotencyKey = "k2"
	if res, err := w.writer.Post(ctx, req); err != nil || !errors.Is(res.Err, comment.ErrDuplicateText) {
		t.Fatalf("another key: %+v, %v", res, err)
	}
}

func TestRecentTextsBounded(t *testing.T) {
	// No rate limit: a user posts more than the state holds.
	w, c := spamWorld(t, 0, comment.SpamRules{DuplicateWindow: time.Hour}, 0)
	for i := range comment.MaxRecentTexts + 10 {
		w.post(t, "alice", "v1", "", fmt.Sprint("text ", i))
		c.add(time.Second)
	}
	if n := len(w.recentTexts(t, "alice")); n != comment.MaxRecentTextsBytes {
		t.Errorf("%d bytes of recent texts, want the bound %d", n, comment.MaxRecentTextsBytes)
	}
	// The newest are kept, the oldest forgotten.
	if res := w.try("alice", "v2", fmt.Sprint("text ", comment.MaxRecentTexts+9), time.Time{}); !errors.Is(res.Err, comment.ErrDuplicateText) {
		t.Errorf("the newest text again: %+v", res)
	}
	w.post(t, "alice", "v2", "", "text 0")
}

func TestYoungAccounts(t *testing.T) {
	rules := comment.SpamRules{YoungAge: 24 * time.Hour}
	// 10 a minute (5 at once); young accounts 2 (1 at once, then one every 30 s).
	w, c := spamWorld(t, 10, rules, 2)
	now := c.now()
	young, old := now.Add(-time.Hour), now.Add(-25*time.Hour)
	const link = "my channel: example.com/me"
	if res := w.try("newbie", "v1", link, young); !errors.Is(res.Err, comment.ErrYoungAccountLinks) {
		t.Fatalf("a young account's link: %+v", res)
	}
	w.post(t, "veteran", "v1", "", link) // no record: not young
	if res := w.try("elder", "v1", link, old); res.Err != nil {
		t.Fatalf("an old account's link: %+v", res)
	}
	// The young account's rate: one at once, then one every 30 s.
	if res := w.try("newbie", "v1", "hello", young); res.Err != nil {
		t.Fatalf("a young account's first comment: %+v", res)
	}
	var limited *errs.RateLimitedError
	if res := w.try("newbie", "v1", "hello again", young); !errors.As(res.Err, &limited) {
		t.Fatalf("a young account's second comment at once: %+v", res)
	}
	for i := range 4 {
		if res := w.try("elder", "v1", fmt.Sprint("and ", i), old); res.Err != nil {
			t.Fatalf("an old account's comment %d: %+v", i+2, res)
		}
	}
	// Grown up: the ordinary limit and links.
	c.add(24 * time.Hour)
	if res := w.try("newbie", "v1", link, young); res.Err != nil {
		t.Fatalf("a day later: %+v", res)
	}
	w.deliver(t)
	if got := w.counts(t, "", "v1")["v1"].Comments; got != 8 {
		t.Errorf("%d comments, want 8: refused posts must not count", got)
	}
}

// A post writes its poster's row once: the rate limit's timestamp and the
// recent texts in one mutation, and both hold after.
func TestPosterRowWrittenOnce(t *testing.T) {
	// 4 a minute: 2 at once, then one every 20 s.
	w, _ := spamWorld(t, 4, comment.SpamRules{DuplicateWindow: time.Hour}, 0)
	before := otelcount.Global().Spanner()
	w.post(t, "alice", "v1", "", "one")
	w.post(t, "alice", "v1", "", "two")
	if got := otelcount.Global().Spanner().Minus(before).WritesByTable["CommentRateLimits"]; got != 2 {
		t.Errorf("%d writes of CommentRateLimits for 2 posts, want 2", got)
	}
	var limited *errs.RateLimitedError
	if res := w.try("alice", "v1", "three", time.Time{}); !errors.As(res.Err, &limited) {
		t.Errorf("a third post at once: %+v, want rate limited", res)
	}
	if res := w.try("alice", "v2", "two", time.Time{}); !errors.Is(res.Err, comment.ErrDuplicateText) {
		t.Errorf("the same text again: %+v, want refused as a duplicate", res)
	}
}
