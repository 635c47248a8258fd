package workload

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Spec is a mixed load. Reactors set random reactions (like, dislike, none)
// on the keys; watchers record watches at random times of the last day (so
// out of order) and, with HistoryDeletes, delete videos from their history
// and now and then clear it; commenters post comments and replies on the
// keys and delete some of theirs (some twice); a spammer posts comments that
// a moderator sweeps as spam about every second (deleted ones and ones with
// replies among them); readers read counts and histories, and with
// ReadListings and ReadReplies the comment listings too.
type Spec struct {
	Reactors, Watchers, Commenters, Readers int
	Keys                                    []string
	// Pace is the pause between one user's operations (default 50 ms).
	Pace time.Duration
	// HistoryDeletes turns on the watchers' deletions.
	HistoryDeletes bool
	// ReadListings adds the videos' comment listings to the readers'
	// reads, ReadReplies the comments' reply listings.
	ReadListings, ReadReplies bool
	// WriteDeadline bounds the retries of one write (default 90 s): a
	// write not accepted by then fails the load.
	WriteDeadline time.Duration
	// Seed makes the choices repeatable; zero takes the clock.
	Seed uint64
	// ViewWindow is the stack's viewing window (VIEW_WINDOW), which must
	// hold the whole run (ViewWindowFor): the model counts views by it.
	ViewWindow time.Duration
	// OwnReads makes each reactor also react, one time in five, on an item
	// of its own (solo-<user>, reacted on by no one else) and read its own
	// counts of it at once: GET /v1/me/counts must count exactly the
	// reaction just set, whatever the pipeline is doing (pending, counted,
	// folded, frozen).
	OwnReads bool
}

// Tokens mints an ID token for a user (a moderator's when moderator).
type Tokens func(uid string, moderator bool) (string, error)

// Load is a running load.
type Load struct {
	Model *Model
	Rec   *Recorder
	Seed  uint64

	c    *Client
	spec Spec
	stop chan struct{}
	wg   sync.WaitGroup

	mu   sync.Mutex
	errs []error
	own  OwnReads
}

// OwnReads counts the reactors' reads of their own counts (Spec.OwnReads).
type OwnReads struct {
	Checked int
	Wrong   []string
}

// Own returns the reads of the reactors' own counts so far.
func (l *Load) Own() OwnReads {
	l.mu.Lock()
	defer l.mu.Unlock()
	return OwnReads{Checked: l.own.Checked, Wrong: slices.Clone(l.own.Wrong)}
}

// Start starts the users of spec against c.
func Start(c *Client, tokens Tokens, spec Spec) (*Load, error) {
	if spec.Pace == 0 {
		spec.Pace = 50 * time.Millisecond
	}
	if spec.WriteDeadline == 0 {
		spec.WriteDeadline = 90 * time.Second
	}
	if spec.Seed == 0 {
		spec.Seed = uint64(time.Now().UnixNano())
	}
	if len(spec.Keys) == 0 {
		return nil, errors.New("workload: no keys")
	}
	if spec.ViewWindow <= 0 {
		return nil, errors.New("workload: no view window")
	}
	l := &Load{Model: NewModel(spec.ViewWindow), Rec: &Recorder{}, Seed: spec.Seed, c: c, spec: spec, stop: make(chan struct{})}
	type user struct {
		name string
		mod  bool
		run  func(tok string, rnd *rand.Rand)
	}
	var users []user
	for i := range spec.Reactors {
		name := fmt.Sprintf("reactor-%d", i)
		users = append(users, user{name: name, run: func(tok string, rnd *rand.Rand) { l.react(name, tok, rnd) }})
	}
	for i := range spec.Watchers {
		name := fmt.Sprintf("watcher-%d", i)
		users = append(users, user{name: name, run: func(tok string, rnd *rand.Rand) { l.watch(name, tok, rnd) }})
	}
	if spec.Commenters > 0 {
		sp := &spamPool{}
		for i := range spec.Commenters {
			name := fmt.Sprintf("commenter-%d", i)
			users = append(users, user{name: name, run: func(tok string, rnd *rand.Rand) { l.comment(name, tok, rnd, sp) }})
		}
		users = append(users,
			user{name: "spammer", run: func(tok string, rnd *rand.Rand) { l.spam(tok, rnd, sp) }},
			user{name: "moderator", mod: true, run: func(tok string, rnd *rand.Rand) { l.sweep(tok, rnd, sp) }})
	}
	for i := range spec.Readers {
		// A reader reads as a watcher (its history) and anonymously.
		name := fmt.Sprintf("watcher-%d", i%max(spec.Watchers, 1))
		users = append(users, user{name: "reader:" + name, run: func(tok string, rnd *rand.Rand) { l.read(tok, rnd) }})
	}
	toks := map[string]string{}
	for _, u := range users {
		name := strings.TrimPrefix(u.name, "reader:")
		if _, ok := toks[name]; !ok {
			tok, err := tokens(name, u.mod)
			if err != nil {
				return nil, fmt.Errorf("token of %s: %w", name, err)
			}
			toks[name] = tok
			l.Model.AddUser(name, tok)
		}
	}
	for i, u := range users {
		tok := toks[strings.TrimPrefix(u.name, "reader:")]
		rnd := rand.New(rand.NewPCG(spec.Seed, uint64(i)))
		l.wg.Go(func() { u.run(tok, rnd) })
	}
	return l, nil
}

// Stop stops the users, waits for the writes in progress to be accepted
// and returns the writes that never were (and any answer the model could
// not take).
func (l *Load) Stop() []error {
	close(l.stop)
	l.wg.Wait()
	return l.Errors()
}

// Errors returns the writes that were never accepted so far. A user whose
// write fails stops, so a caller waiting for the load's effects checks it.
func (l *Load) Errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func (l *Load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *Load) pause() {
	select {
	case <-l.stop:
	case <-time.After(l.spec.Pace):
	}
}

func (l *Load) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *Load) key(rnd *rand.Rand) string { return l.spec.Keys[rnd.IntN(len(l.spec.Keys))] }

// until repeats a write while the API answers 503 or 429 (waiting its
// Retry-After, at most 2 s), a 5xx, or does not answer, until it answers
// want. Every write of the load is idempotent (a reaction is set, a watch
// is its time, a post has its Idempotency-Key, deletes delete), so a retry
// after an answer that broke the spec (a 500, recorded as such) is safe and
// keeps the model exact. notFound, when set, takes a 404 as the end of the
// write (nothing done).
func (l *Load) until(op, method, path, tok, body string, want int, notFound, accepted func([]byte) error, hdr ...string) error {
	return l.untilHeader(op, method, path, tok, body, want, notFound, func(_ http.Header, b []byte) error { return accepted(b) }, hdr...)
}

// untilHeader is until with the accepted answer's headers.
func (l *Load) untilHeader(op, method, path, tok, body string, want int, notFound func([]byte) error, accepted func(http.Header, []byte) error, hdr ...string) error {
	deadline := time.Now().Add(l.spec.WriteDeadline)
	for {
		code, h, b := l.c.Do(l.Rec, op, method, path, tok, body, hdr...)
		switch {
		case code == want:
			return accepted(h, b)
		case code == http.StatusNotFound && notFound != nil:
			return notFound(b)
		case code >= 500, code == http.StatusTooManyRequests, code == 0:
		default:
			return fmt.Errorf("%s %s %s: %d %s", method, path, body, code, b)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s %s %s: not accepted within %v (last: %d %s)", method, path, body, l.spec.WriteDeadline, code, b)
		}
		wait := 200 * time.Millisecond
		if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil {
			wait = min(time.Duration(s)*time.Second, 2*time.Second)
		}
		time.Sleep(wait)
	}
}

// ---- reactions

func (l *Load) react(user, tok string, rnd *rand.Rand) {
	kinds := []string{"like", "dislike", "none"}
	for !l.stopped() {
		item, kind := l.key(rnd), kinds[rnd.IntN(len(kinds))]
		own := l.spec.OwnReads && rnd.IntN(5) == 0
		if own {
			item = "solo-" + user
		}
		session, err := l.setReaction(user, tok, item, kind)
		if err != nil {
			l.fail(err)
			return
		}
		if own {
			if err := l.readOwn(tok, item, kind, session); err != nil {
				l.fail(err)
				return
			}
		}
		l.pause()
	}
}

// readOwn reads the caller's counts of item, on which only the caller
// reacts, right after its reaction kind was accepted (repeated as a write
// is, see until), with the write's session token as a client sends it, and
// records whether the counts are exactly that reaction.
func (l *Load) readOwn(tok, item, kind, session string) error {
	var want [2]int64
	switch kind {
	case "like":
		want[0] = 1
	case "dislike":
		want[1] = 1
	}
	if session == "" {
		return fmt.Errorf("PUT /v1/reactions/%s: no Session-Token in the answer", item)
	}
	return l.until("GET /v1/me/counts", "GET", "/v1/me/counts?ids="+item, tok, "", http.StatusOK, nil, func(b []byte) error {
		var resp MeCounts
		if err := json.Unmarshal(b, &resp); err != nil {
			return fmt.Errorf("GET /v1/me/counts?ids=%s: answer %s", item, b)
		}
		got, r := resp.Counts[item], resp.Reaction(item)
		l.mu.Lock()
		defer l.mu.Unlock()
		l.own.Checked++
		if [2]int64{got.Likes, got.Dislikes} != want || r != kind {
			l.own.Wrong = append(l.own.Wrong, fmt.Sprintf("%s right after setting %s: %d likes, %d dislikes, reaction %q", item, kind, got.Likes, got.Dislikes, r))
		}
		return nil
	}, "Session-Token", session)
}

// SetReaction sends PUT /v1/reactions/{item} until it is accepted.
func (l *Load) SetReaction(user, tok, item, kind string) error {
	_, err := l.setReaction(user, tok, item, kind)
	return err
}

// setReaction is SetReaction, returning the answer's session token.
func (l *Load) setReaction(user, tok, item, kind string) (session string, err error) {
	body := `{"reaction":"` + kind + `"}`
	err = l.untilHeader("PUT /v1/reactions", "PUT", "/v1/reactions/"+item, tok, body, http.StatusOK, nil, func(h http.Header, b []byte) error {
		var r struct{ Reaction string }
		if err := json.Unmarshal(b, &r); err != nil || r.Reaction != kind {
			return fmt.Errorf("PUT /v1/reactions/%s %s: answer %s", item, kind, b)
		}
		session = h.Get("Session-Token")
		l.Model.SetReaction(user, item, kind)
		return nil
	})
	return session, err
}

// ---- watch history

func (l *Load) watch(user, tok string, rnd *rand.Rand) {
	for !l.stopped() {
		var err error
		switch r := rnd.IntN(100); {
		case l.spec.HistoryDeletes && r < 6:
			err = l.DeleteVideo(user, tok, l.key(rnd))
		case l.spec.HistoryDeletes && r < 7:
			err = l.ClearHistory(user, tok)
		default:
			// Watches arrive out of order: dated in the last 5 minutes
			// (a view), or backdated from just over a viewing window to a
			// day more (history, never a view).
			age := time.Duration(rnd.Int64N(int64(5 * time.Minute)))
			if rnd.IntN(2) == 0 {
				age = l.spec.ViewWindow + time.Minute + time.Duration(rnd.Int64N(int64(24*time.Hour)))
			}
			at := time.Now().Add(-age).UTC().Truncate(time.Millisecond)
			err = l.RecordWatch(user, tok, l.key(rnd), at)
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// RecordWatch sends POST /v1/history until it is accepted.
func (l *Load) RecordWatch(user, tok, video string, at time.Time) error {
	pos := float64(at.UnixMilli()%100000) / 10 // one position per watch time
	body := fmt.Sprintf(`{"videoId":%q,"watchedAt":%q,"positionSeconds":%v}`, video, at.Format(time.RFC3339Nano), pos)
	return l.until("POST /v1/history", "POST", "/v1/history", tok, body, http.StatusAccepted, nil, func(b []byte) error {
		if strings.TrimSpace(string(b)) != `{"recorded":true}` {
			return fmt.Errorf("POST /v1/history %s: answer %s", body, b)
		}
		l.Model.AddWatch(WatchKey{user, video, at.UnixMilli()}, pos)
		return nil
	})
}

// DeleteVideo sends DELETE /v1/history/{video} until it is accepted.
func (l *Load) DeleteVideo(user, tok, video string) error {
	return l.until("DELETE /v1/history/{videoId}", "DELETE", "/v1/history/"+video, tok, "", http.StatusNoContent, nil, func([]byte) error {
		l.Model.DeleteVideo(user, video)
		return nil
	})
}

// ClearHistory sends DELETE /v1/history until it is accepted.
func (l *Load) ClearHistory(user, tok string) error {
	return l.until("DELETE /v1/history", "DELETE", "/v1/history", tok, "", http.StatusNoContent, nil, func([]byte) error {
		l.Model.ClearHistory(user)
		return nil
	})
}

// ---- comments

// spamPool holds the spammer's comments for the moderator to sweep.
type spamPool struct {
	mu  sync.Mutex
	ids []string
}

func (p *spamPool) add(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
}

// pick returns up to n of the spammer's comments, removed ones included.
func (p *spamPool) pick(rnd *rand.Rand, n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, i := range rnd.Perm(len(p.ids)) {
		if len(out) == n {
			break
		}
		out = append(out, p.ids[i])
	}
	return out
}

func (p *spamPool) any(rnd *rand.Rand) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ids) == 0 {
		return ""
	}
	return p.ids[rnd.IntN(len(p.ids))]
}

// comment posts comments, replies to its own and to the spammer's, and
// deletes some of its own (some twice).
func (l *Load) comment(user, tok string, rnd *rand.Rand, sp *spamPool) {
	var mine, replies []string // own visible comments and replies
	for n := 0; !l.stopped(); n++ {
		var err error
		switch r := rnd.IntN(10); {
		case r < 3 || len(mine) == 0:
			var id string
			if id, err = l.PostComment(user, tok, l.key(rnd), "", n); err == nil {
				mine = append(mine, id)
			}
		case r < 5:
			var id string
			if id, err = l.PostComment(user, tok, "", mine[rnd.IntN(len(mine))], n); err == nil && id != "" {
				replies = append(replies, id)
			}
		case r < 6:
			// A reply to the spammer's comment, which the moderator may
			// remove at any moment: 404 then, and nothing was posted.
			if parent := sp.any(rnd); parent != "" {
				_, err = l.PostComment(user, tok, "", parent, n)
			}
		case r < 8 && len(replies) > 0:
			i := rnd.IntN(len(replies))
			err = l.DeleteComment(tok, replies[i])
			replies = slices.Delete(replies, i, i+1)
		default:
			i := rnd.IntN(len(mine))
			id := mine[i]
			if err = l.DeleteComment(tok, id); err == nil && rnd.IntN(3) == 0 {
				err = l.DeleteComment(tok, id) // again: 204, and no count moves
			}
			mine = slices.Delete(mine, i, i+1)
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// spam posts top-level comments for the moderator to sweep (at a quarter
// of the other users' pace), and deletes a quarter of them itself first.
func (l *Load) spam(tok string, rnd *rand.Rand, sp *spamPool) {
	for n := 0; !l.stopped(); n++ {
		for range 3 {
			l.pause()
		}
		if l.stopped() {
			return
		}
		id, err := l.PostComment("spammer", tok, l.key(rnd), "", n)
		if err == nil {
			sp.add(id)
			if rnd.IntN(4) == 0 {
				err = l.DeleteComment(tok, id)
			}
		}
		if err != nil {
			l.fail(err)
			return
		}
		l.pause()
	}
}

// sweep marks batches of the spammer's comments as spam, those already
// removed included, about every second.
func (l *Load) sweep(tok string, rnd *rand.Rand, sp *spamPool) {
	for {
		select {
		case <-l.stop:
			return
		case <-time.After(time.Second):
		}
		ids := sp.pick(rnd, 5)
		if len(ids) == 0 {
			continue
		}
		body, _ := json.Marshal(map[string][]string{"commentIds": ids})
		err := l.until("POST /v1/moderation/spam", "POST", "/v1/moderation/spam", tok, string(body), http.StatusOK, nil, func([]byte) error {
			l.Model.RemoveComments(ids...)
			return nil
		})
		if err != nil {
			l.fail(err)
			return
		}
	}
}

// PostComment posts a comment (parent "") or a reply until it is accepted,
// every attempt with the same Idempotency-Key, and returns its id. A reply
// whose parent is gone answers 404: it returns "" and no error.
func (l *Load) PostComment(user, tok, video, parent string, n int) (string, error) {
	body := fmt.Sprintf(`{"text":"comment %d of %s"}`, n, user)
	var gone func([]byte) error
	if parent != "" {
		video = l.Model.CommentVideo(parent) // replies go on the parent's video
		body = fmt.Sprintf(`{"text":"reply %d of %s","parentId":%q}`, n, user, parent)
		gone = func([]byte) error { return nil }
	}
	path := "/v1/videos/" + video + "/comments"
	var id string
	err := l.until("POST /v1/videos/{videoId}/comments", "POST", path, tok, body, http.StatusCreated, gone, func(b []byte) error {
		var c struct{ ID, VideoID, ParentID string }
		if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || c.VideoID != video || c.ParentID != parent {
			return fmt.Errorf("POST %s %s: answer %s", path, body, b)
		}
		id = c.ID
		l.Model.AddComment(Comment{ID: c.ID, Video: video, Parent: parent, Author: user})
		return nil
	}, "Idempotency-Key", fmt.Sprintf("%s-%d", user, n))
	return id, err
}

// DeleteComment deletes a comment until it is accepted.
func (l *Load) DeleteComment(tok, id string) error {
	return l.until("DELETE /v1/comments/{commentId}", "DELETE", "/v1/comments/"+id, tok, "", http.StatusNoContent, nil, func([]byte) error {
		l.Model.RemoveComments(id)
		return nil
	})
}

// ---- reads

func (l *Load) read(tok string, rnd *rand.Rand) {
	// In canonical order: any other is answered with a redirect to it.
	ids := strings.Join(slices.Sorted(slices.Values(l.spec.Keys[:min(len(l.spec.Keys), 50)])), ",")
	for !l.stopped() {
		switch r := rnd.IntN(4); {
		case r == 0:
			l.c.Do(l.Rec, "GET /v1/counts", "GET", "/v1/counts?ids="+ids, "", "")
		case r == 1:
			l.c.Do(l.Rec, "GET /v1/history", "GET", "/v1/history?pageSize=20", tok, "")
		case r == 2 && l.spec.ReadListings && l.spec.Commenters > 0:
			l.c.Do(l.Rec, "GET /v1/videos/{videoId}/comments", "GET", "/v1/videos/"+l.key(rnd)+"/comments?pageSize=20", "", "")
		case r == 3 && l.spec.ReadReplies && l.spec.Commenters > 0:
			if ps := l.Model.VisibleParents(); len(ps) > 0 {
				l.c.Do(l.Rec, "GET /v1/comments/{commentId}/replies", "GET", "/v1/comments/"+ps[rnd.IntN(len(ps))]+"/replies?pageSize=20", "", "")
			}
		default:
			l.c.Do(l.Rec, "GET /v1/me/counts", "GET", "/v1/me/counts?ids="+ids, tok, "")
		}
		l.pause()
	}
}
