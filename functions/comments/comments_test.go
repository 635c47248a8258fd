package commentsfn_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/go-cmp/cmp"

	commentsfn "github.com/videngage/engagement/functions/comments"
	"github.com/videngage/engagement/functions/host"
	moderationfn "github.com/videngage/engagement/functions/moderation"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/countstore"
	"github.com/videngage/engagement/shared/counter/outboxstore"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/events"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func TestEveryRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	before := time.Now().UTC()

	// POST a comment: 201, the comment.
	r := e.do("POST", "/v1/videos/vid/comments", e.token("alice"), `{"text":"first!"}`).Want(t, http.StatusCreated, "POST")
	var top commentJSON
	apitest.DecodeStrict(t, r.Body, &top)
	created, err := time.Parse(time.RFC3339Nano, top.CreateTime)
	if err != nil || created.Location() != time.UTC || created.Before(before.Add(-time.Second)) || created.After(time.Now().Add(time.Second)) {
		t.Errorf("createTime %q: %v", top.CreateTime, err)
	}
	want := commentJSON{ID: top.ID, VideoID: "vid", AuthorID: "alice", Text: "first!", CreateTime: top.CreateTime}
	if diff := cmp.Diff(want, top); diff != "" {
		t.Errorf("POST answered (-want +got):\n%s", diff)
	}
	if strings.Contains(string(r.Body), "parentId") {
		t.Errorf("a top-level comment shows a parentId: %s", r.Body)
	}

	// A reply.
	reply := e.post("bob", "vid", top.ID, "welcome")
	if reply.ParentID != top.ID || reply.VideoID != "vid" || reply.AuthorID != "bob" {
		t.Errorf("reply %+v", reply)
	}

	// Listing: the top-level comment with its reply count from the counters.
	p := e.list("/v1/videos/vid/comments")
	if len(p.Comments) != 1 || p.Comments[0].ID != top.ID || p.Comments[0].ReplyCount != 1 || p.NextPageToken != "" {
		t.Errorf("listing %+v", p)
	}
	p = e.list("/v1/comments/" + top.ID + "/replies")
	if len(p.Comments) != 1 || p.Comments[0].ID != reply.ID || p.Comments[0].Text != "welcome" {
		t.Errorf("replies %+v", p)
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 2, Threads: 1}, top.ID: {Replies: 1}}, e.counts("", "vid", top.ID)); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	// DELETE the reply: 204, twice.
	for i := 0; i < 2; i++ {
		r = e.do("DELETE", "/v1/comments/"+reply.ID, e.token("bob"), nil).Want(t, http.StatusNoContent, "DELETE")
		if len(r.Body) != 0 {
			t.Errorf("204 with a body %s", r.Body)
		}
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 1, Threads: 1}, top.ID: {}}, e.counts("", "vid", top.ID)); diff != "" {
		t.Errorf("counts after the delete (-want +got):\n%s", diff)
	}

	// Spam: 200 {"updated":n}.
	r = e.do("POST", "/v1/moderation/spam", e.moderator("mod"), map[string]any{"commentIds": []string{top.ID, top.ID, "unknown"}}).
		Want(t, http.StatusOK, "POST spam")
	if got := strings.TrimSpace(string(r.Body)); got != `{"updated":1}` {
		t.Errorf("spam answered %s", got)
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {}, top.ID: {}}, e.counts("", "vid", top.ID)); diff != "" {
		t.Errorf("counts after the sweep (-want +got):\n%s", diff)
	}
	if p := e.list("/v1/videos/vid/comments"); len(p.Comments) != 0 {
		t.Errorf("spam listed: %+v", p)
	}
	apitest.CheckError(t, "replies of a spam comment", e.do("GET", "/v1/comments/"+top.ID+"/replies", "", nil), 404, "NOT_FOUND", errs.CommentNotFound)
	e.exact("vid", top.ID)

	// Wrong methods answer 405 with Allow.
	r = e.do("PUT", "/v1/videos/vid/comments", e.token("alice"), `{}`)
	apitest.CheckError(t, "PUT comments", r, 405, "INVALID_ARGUMENT", errs.MethodNotAllowed)
	if allow := r.Header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Errorf("Allow %q", allow)
	}
	apitest.CheckError(t, "unknown path", e.do("GET", "/v1/videos/vid/other", "", nil), 404, "NOT_FOUND", errs.UnknownPath)
}

func TestPostValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	top := e.post("alice", "vid", "", "top")
	reply := e.post("bob", "vid", top.ID, "reply")
	gone := e.post("alice", "vid", "", "gone")
	e.do("DELETE", "/v1/comments/"+gone.ID, tok, nil).Want(t, http.StatusNoContent, "DELETE")
	path := "/v1/videos/vid/comments"
	cases := []struct {
		name   string
		path   string
		token  string
		body   any
		hdr    []string
		code   int
		status string
		reason errs.Reason
	}{
		{"no token", path, "", `{"text":"x"}`, nil, 401, "UNAUTHENTICATED", errs.TokenMissing},
		{"bad token", path, "not-a-token", `{"text":"x"}`, nil, 401, "UNAUTHENTICATED", errs.TokenInvalid},
		{"bad video id", "/v1/videos/bad%20id/comments", tok, `{"text":"x"}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"long video id", "/v1/videos/" + strings.Repeat("v", 65) + "/comments", tok, `{"text":"x"}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"no body", path, tok, nil, nil, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"not JSON", path, tok, `text=x`, nil, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"no text", path, tok, `{}`, nil, 400, "INVALID_ARGUMENT", errs.MissingField},
		{"null text", path, tok, `{"text":null}`, nil, 400, "INVALID_ARGUMENT", errs.MissingField},
		{"text not a string", path, tok, `{"text":5}`, nil, 400, "INVALID_ARGUMENT", errs.WrongFieldType},
		{"empty text", path, tok, `{"text":""}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"blank text", path, tok, `{"text":" \n\t "}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"three links", path, tok, `{"text":"cheap: https://a.example bit.ly/b www.c.example"}`, nil, 400, "INVALID_ARGUMENT", errs.TooManyLinks},
		{"10,001 characters", path, tok, map[string]string{"text": strings.Repeat("é", comment.MaxTextChars+1)}, nil, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"raw invalid UTF-8", path, tok, []byte("{\"text\":\"bad \xff byte\"}"), nil, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"lone surrogate escape", path, tok, `{"text":"half \ud83d of an emoji"}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"unknown field", path, tok, `{"text":"x","videoId":"other"}`, nil, 400, "INVALID_ARGUMENT", errs.UnknownField},
		{"two objects", path, tok, `{"text":"x"}{"text":"y"}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidJSON},
		{"bad parent id", path, tok, `{"text":"x","parentId":"a/b"}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"empty parent id", path, tok, `{"text":"x","parentId":""}`, nil, 400, "INVALID_ARGUMENT", errs.InvalidID},
		{"unknown parent", path, tok, `{"text":"x","parentId":"nope"}`, nil, 404, "NOT_FOUND", errs.ParentNotFound},
		{"deleted parent", path, tok, fmt.Sprintf(`{"text":"x","parentId":%q}`, gone.ID), nil, 404, "NOT_FOUND", errs.ParentNotFound},
		{"reply to a reply", path, tok, fmt.Sprintf(`{"text":"x","parentId":%q}`, reply.ID), nil, 400, "INVALID_ARGUMENT", errs.ParentIsReply},
		{"parent of another video", "/v1/videos/vid2/comments", tok, fmt.Sprintf(`{"text":"x","parentId":%q}`, top.ID), nil, 400, "INVALID_ARGUMENT", errs.ParentOnOtherVideo},
		{"body over 64 KiB", path, tok, map[string]string{"text": strings.Repeat("a", 70000)}, nil, 413, "INVALID_ARGUMENT", errs.BodyTooLarge},
		{"empty Idempotency-Key", path, tok, `{"text":"x"}`, []string{"Idempotency-Key", ""}, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"long Idempotency-Key", path, tok, `{"text":"x"}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "INVALID_ARGUMENT", errs.InvalidValue},
		{"two Idempotency-Keys", path, tok, `{"text":"x"}`, []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, 400, "INVALID_ARGUMENT", errs.RepeatedParameter},
	}
	for _, c := range cases {
		apitest.CheckError(t, c.name, e.do("POST", c.path, c.token, c.body, c.hdr...), c.code, c.status, c.reason)
	}
	// Accepted edges: exactly 10,000 characters (of 4 bytes each), an explicit
	// null parentId, escaped non-ASCII, a surrogate pair, two links.
	for name, body := range map[string]any{
		"10,000 characters": map[string]string{"text": strings.Repeat("😀", comment.MaxTextChars)},
		"null parentId":     `{"text":"x","parentId":null}`,
		"escapes":           `{"text":"caf\u00e9 \ud83d\ude00"}`,
		"two links":         `{"text":"sources: https://a.example/x and bit.ly/y"}`,
	} {
		r := e.do("POST", path, tok, body)
		if r.Code != http.StatusCreated {
			t.Errorf("%s: %d %s", name, r.Code, r.Body)
		}
	}
	var c commentJSON
	apitest.DecodeStrict(t, e.do("POST", path, tok, `{"text":"caf\u00e9 \ud83d\ude00"}`).Want(t, 201, "escapes").Body, &c)
	if c.Text != "café 😀" {
		t.Errorf("text %q", c.Text)
	}
	// Nothing refused was counted: top, reply, 5 accepted posts (gone is deleted).
	e.exact("vid", "vid2", top.ID)
	if got := e.counts("", "vid")["vid"].Comments; got != 7 {
		t.Errorf("vid counts %d comments, want 7", got)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	path := "/v1/videos/vid/comments"
	first := e.do("POST", path, e.token("alice"), `{"text":"hello"}`, "Idempotency-Key", "k1").Want(t, 201, "first")
	top := commentJSON{}
	apitest.DecodeStrict(t, first.Body, &top)
	// A reply, so that the retry's replyCount shows the counters.
	e.post("bob", "vid", top.ID, "hi")
	for i := 0; i < 3; i++ {
		again := e.do("POST", path, e.token("alice"), `{"text":"hello"}`, "Idempotency-Key", "k1").Want(t, 201, "retry")
		var c commentJSON
		apitest.DecodeStrict(t, again.Body, &c)
		want := top
		want.ReplyCount = 1
		if diff := cmp.Diff(want, c); diff != "" {
			t.Errorf("retry %d answered another comment (-want +got):\n%s", i, diff)
		}
	}
	// Another user's same key is theirs.
	var bobs commentJSON
	apitest.DecodeStrict(t, e.do("POST", path, e.token("bob"), `{"text":"hello"}`, "Idempotency-Key", "k1").Want(t, 201, "bob").Body, &bobs)
	if bobs.ID == top.ID || bobs.AuthorID != "bob" {
		t.Errorf("bob's post with alice's key: %+v", bobs)
	}
	// The same key for another comment is refused.
	apitest.CheckError(t, "key reused", e.do("POST", path, e.token("alice"), `{"text":"different"}`, "Idempotency-Key", "k1"), 400, "INVALID_ARGUMENT", errs.IdempotencyKeyReused)
	// Counted once: alice's comment, bob's reply, bob's comment.
	if got := e.counts(e.token("alice"), "vid")["vid"].Comments; got != 3 {
		t.Errorf("alice reads %d comments, want 3", got)
	}
	if got := e.counts("", "vid")["vid"].Comments; got != 3 {
		t.Errorf("anonymous reads %d comments, want 3", got)
	}
	e.exact("vid", top.ID)
	if n := len(e.list(path).Comments); n != 2 {
		t.Errorf("%d comments listed, want 2", n)
	}
}

func TestListingPagesAndTokens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	var posted []string
	for i := 0; i < 45; i++ {
		posted = append(posted, e.post(fmt.Sprintf("u%d", i), "vid", "", fmt.Sprint(i)).ID)
	}
	parent := posted[0]
	var replies []string
	for i := 0; i < 7; i++ {
		replies = append(replies, e.post("r", "vid", parent, fmt.Sprintf("reply %d", i)).ID)
	}
	// Newest first: the reverse of the posting order (one post per commit here).
	wantTop := make([]string, len(posted))
	for i, id := range posted {
		wantTop[len(posted)-1-i] = id
	}
	for _, size := range []int{1, 7, 20, 45, 100} {
		if diff := cmp.Diff(wantTop, e.listAll("/v1/videos/vid/comments", size)); diff != "" {
			t.Errorf("pageSize %d (-want +got):\n%s", size, diff)
		}
	}
	if diff := cmp.Diff(replies, e.listAll("/v1/comments/"+parent+"/replies", 3)); diff != "" {
		t.Errorf("replies oldest first (-want +got):\n%s", diff)
	}
	def := e.list("/v1/videos/vid/comments")
	if len(def.Comments) != 20 || def.NextPageToken == "" {
		t.Errorf("default page: %d comments, token %q", len(def.Comments), def.NextPageToken)
	}
	last := e.list("/v1/videos/vid/comments?pageSize=100")
	if last.Comments[len(last.Comments)-1].ReplyCount != 7 {
		t.Errorf("parent's replyCount %d, want 7", last.Comments[len(last.Comments)-1].ReplyCount)
	}
	tok := url.QueryEscape(def.NextPageToken)
	for name, c := range map[string]struct {
		path   string
		reason errs.Reason
	}{
		"pageSize 0":                        {"/v1/videos/vid/comments?pageSize=0", errs.InvalidValue},
		"pageSize 101":                      {"/v1/videos/vid/comments?pageSize=101", errs.InvalidValue},
		"pageSize abc":                      {"/v1/videos/vid/comments?pageSize=abc", errs.InvalidValue},
		"pageSize twice":                    {"/v1/videos/vid/comments?pageSize=5&pageSize=5", errs.RepeatedParameter},
		"pageToken twice":                   {"/v1/videos/vid/comments?pageToken=" + tok + "&pageToken=" + tok, errs.RepeatedParameter},
		"garbage token":                     {"/v1/videos/vid/comments?pageToken=garbage", errs.InvalidPageToken},
		"token of other video":              {"/v1/videos/vid2/comments?pageToken=" + tok, errs.InvalidPageToken},
		"token of a video used for replies": {"/v1/comments/" + parent + "/replies?pageToken=" + tok, errs.InvalidPageToken},
		"bad comment id":                    {"/v1/comments/bad.id/replies", errs.InvalidID},
	} {
		apitest.CheckError(t, name, e.do("GET", c.path, "", nil), 400, "INVALID_ARGUMENT", c.reason)
	}
	apitest.CheckError(t, "replies of unknown", e.do("GET", "/v1/comments/unknown/replies", "", nil), 404, "NOT_FOUND", errs.CommentNotFound)
	if p := e.list("/v1/videos/novideo/comments"); len(p.Comments) != 0 || p.NextPageToken != "" {
		t.Errorf("a video without comments: %+v", p)
	}
	// A reply has no replies.
	if p := e.list("/v1/comments/" + replies[0] + "/replies"); len(p.Comments) != 0 {
		t.Errorf("replies of a reply: %+v", p)
	}
	if r := e.do("GET", "/v1/videos/vid/comments", "", nil); r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("Cache-Control %q", r.Header.Get("Cache-Control"))
	}
}

// listAll follows nextPageToken through every page and returns the ids.
func (e *env) listAll(path string, size int) []string {
	e.t.Helper()
	var ids []string
	tok := ""
	for pages := 0; pages < 1000; pages++ {
		q := fmt.Sprintf("%s?pageSize=%d", path, size)
		if tok != "" {
			q += "&pageToken=" + url.QueryEscape(tok)
		}
		p := e.list(q)
		if len(p.Comments) > size {
			e.t.Fatalf("page of %d for pageSize %d", len(p.Comments), size)
		}
		for _, c := range p.Comments {
			ids = append(ids, c.ID)
		}
		if p.NextPageToken == "" {
			return ids
		}
		tok = p.NextPageToken
	}
	e.t.Fatal("no last page")
	return nil
}

// Deletions are limited per user, apart from posts; a deletion refused
// changes nothing.
func TestDeletesRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{deleteLimit: 2})
	var ids []string
	for i := range 3 {
		ids = append(ids, e.post("ned", "vdel", "", fmt.Sprintf("comment %d", i)).ID)
	}
	tok := e.token("ned")
	e.do("DELETE", "/v1/comments/"+ids[0], tok, nil).Want(t, http.StatusNoContent, "first deletion")
	e.do("DELETE", "/v1/comments/"+ids[0], tok, nil).Want(t, http.StatusNoContent, "the same deletion again")
	r := e.do("DELETE", "/v1/comments/"+ids[1], tok, nil)
	apitest.CheckError(t, "a deletion over the limit", r, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", errs.RateLimited)
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q, want 1 to 60 seconds", r.Header.Get("Retry-After"))
	}
	if got := e.list("/v1/videos/vdel/comments"); len(got.Comments) != 2 {
		t.Errorf("comments after a refused deletion: %d, want 2", len(got.Comments))
	}
	// Posting is not held back, nor is another user.
	e.post("ned", "vdel", "", "still posting")
	other := e.post("ora", "vdel", "", "mine")
	e.do("DELETE", "/v1/comments/"+other.ID, e.token("ora"), nil).Want(t, http.StatusNoContent, "another user")
}

func TestDeleteAndSpamRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	c := e.post("alice", "vid", "", "mine")
	apitest.CheckError(t, "delete without token", e.do("DELETE", "/v1/comments/"+c.ID, "", nil), 401, "UNAUTHENTICATED", errs.TokenMissing)
	apitest.CheckError(t, "delete by another user", e.do("DELETE", "/v1/comments/"+c.ID, e.token("bob"), nil), 403, "PERMISSION_DENIED", errs.NotAuthor)
	apitest.CheckError(t, "delete unknown", e.do("DELETE", "/v1/comments/unknown", e.token("alice"), nil), 404, "NOT_FOUND", errs.CommentNotFound)
	apitest.CheckError(t, "delete bad id", e.do("DELETE", "/v1/comments/a.b", e.token("alice"), nil), 400, "INVALID_ARGUMENT", errs.InvalidID)
	d := e.post("carol", "vid", "", "rude")
	e.do("DELETE", "/v1/comments/"+d.ID, e.moderator("mod"), nil).Want(t, 204, "moderator's delete")
	e.do("DELETE", "/v1/comments/"+d.ID, e.token("carol"), nil).Want(t, 204, "author deletes again")

	spam := "/v1/moderation/spam"
	apitest.CheckError(t, "spam without token", e.do("POST", spam, "", `{"commentIds":["a"]}`), 401, "UNAUTHENTICATED", errs.TokenMissing)
	apitest.CheckError(t, "spam by a user", e.do("POST", spam, e.token("alice"), `{"commentIds":["a"]}`), 403, "PERMISSION_DENIED", errs.NotModerator)
	many := make([]string, comment.MaxRemoveBatch+1)
	for i := range many {
		many[i] = fmt.Sprint("c", i)
	}
	for name, c := range map[string]struct {
		body   any
		reason errs.Reason
	}{
		"no ids":        {`{"commentIds":[]}`, errs.InvalidValue},
		"missing ids":   {`{}`, errs.InvalidValue},
		"1,001 ids":     {map[string]any{"commentIds": many}, errs.InvalidValue},
		"bad id":        {`{"commentIds":["ok","not ok"]}`, errs.InvalidID},
		"unknown field": {`{"commentIds":["a"],"all":true}`, errs.UnknownField},
	} {
		apitest.CheckError(t, name, e.do("POST", spam, e.moderator("mod"), c.body), 400, "INVALID_ARGUMENT", c.reason)
	}
	r := e.do("POST", spam, e.moderator("mod"), map[string]any{"commentIds": many[:comment.MaxRemoveBatch]}).Want(t, 200, "1,000 unknown ids")
	if strings.TrimSpace(string(r.Body)) != `{"updated":0}` {
		t.Errorf("1,000 unknown ids: %s", r.Body)
	}
	// Spam over a deleted comment records the verdict (updated 1) and moves no count.
	r = e.do("POST", spam, e.moderator("mod"), map[string]any{"commentIds": []string{d.ID, c.ID}}).Want(t, 200, "spam")
	if strings.TrimSpace(string(r.Body)) != `{"updated":2}` {
		t.Errorf("spam: %s", r.Body)
	}
	// The author's delete of a spam comment is a 204 and changes nothing.
	e.do("DELETE", "/v1/comments/"+c.ID, e.token("alice"), nil).Want(t, 204, "delete spam")
	if got := e.counts("", "vid")["vid"].Comments; got != 0 {
		t.Errorf("%d comments, want 0", got)
	}
	e.exact("vid")
}

// TestParentDeleteWithRepliesThroughTheAPI: deleting a thread takes its
// visible replies out of the video's count at once for its author and after
// the consumer for everyone; the thread is no longer listed.
func TestParentDeleteWithRepliesThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	parent := e.post("alice", "vid", "", "parent")
	for i := 0; i < 3; i++ {
		e.post(fmt.Sprint("r", i), "vid", parent.ID, "reply")
	}
	other := e.post("bob", "vid", "", "other")
	e.bus.Hold(true)
	e.do("DELETE", "/v1/comments/"+parent.ID, e.token("alice"), nil).Want(t, 204, "DELETE parent")
	if got := e.counts(e.token("alice"), "vid", parent.ID); got["vid"].Comments != 1 || got["vid"].Threads != 1 || got[parent.ID].Replies != 0 {
		t.Errorf("alice right after deleting her thread: %+v, want 1 comment, 1 thread and 0 replies", got)
	}
	if got := e.counts("", "vid"); got["vid"].Comments != 5 {
		t.Errorf("anonymous before the consumer: %+v, want the 5 counted so far", got)
	}
	e.bus.Release()
	e.bus.Hold(false)
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 1, Threads: 1}, parent.ID: {}}, e.counts("", "vid", parent.ID)); diff != "" {
		t.Errorf("after the consumer (-want +got):\n%s", diff)
	}
	p := e.list("/v1/videos/vid/comments")
	if len(p.Comments) != 1 || p.Comments[0].ID != other.ID {
		t.Errorf("listing %+v", p)
	}
	apitest.CheckError(t, "replies of the deleted parent", e.do("GET", "/v1/comments/"+parent.ID+"/replies", "", nil), 404, "NOT_FOUND", errs.CommentNotFound)
	e.exact("vid", parent.ID)
}

// TestReadYourOwnWrites: with the consumer held back, the author's next
// counts read includes the new comment exactly once, everyone else's does
// not; once the consumer has run, everyone's does, still once.
func TestReadYourOwnWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	top := e.post("alice", "vid", "", "counted")
	e.bus.Hold(true)
	reply := e.post("alice", "vid", top.ID, "pending")
	alice := e.token("alice")
	want := map[string]counter.Values{"vid": {Comments: 2, Threads: 1}, top.ID: {Replies: 1}}
	if diff := cmp.Diff(want, e.counts(alice, "vid", top.ID)); diff != "" {
		t.Errorf("alice before the consumer (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]counter.Values{"vid": {Comments: 1, Threads: 1}, top.ID: {}}, e.counts(e.token("bob"), "vid", top.ID)); diff != "" {
		t.Errorf("bob before the consumer (-want +got):\n%s", diff)
	}
	e.bus.Release()
	for _, tok := range []string{alice, e.token("bob"), ""} {
		if diff := cmp.Diff(want, e.counts(tok, "vid", top.ID)); diff != "" {
			t.Errorf("after the consumer (-want +got):\n%s", diff)
		}
	}
	e.do("DELETE", "/v1/comments/"+reply.ID, alice, nil).Want(t, 204, "DELETE")
	if got := e.counts(alice, "vid", top.ID); got["vid"].Comments != 1 || got[top.ID].Replies != 0 {
		t.Errorf("alice right after her delete: %+v", got)
	}
	e.bus.Release()
	if got := e.counts(alice, "vid", top.ID); got["vid"].Comments != 1 || got[top.ID].Replies != 0 {
		t.Errorf("alice after the consumer: %+v", got)
	}
}

// TestHotVideoShardScaling: a hot video's comment counter spreads over more
// shards, as reactions do, and the count stays exact.
func TestHotVideoShardScaling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{policy: counter.ShardPolicy{WritesPerShard: 2, MinWindow: time.Second}})
	ctx := context.Background()
	if _, err := e.folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 60
	for i := 0; i < n; i++ {
		e.post(fmt.Sprint("u", i), "hot", "", "wow")
	}
	if _, err := e.folds.Fold(ctx); err != nil {
		t.Fatal(err)
	}
	shards, err := e.folds.ShardCount(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if shards <= counter.MinShards {
		t.Errorf("hot video on %d shards after %d posts, want more than %d", shards, n, counter.MinShards)
	}
	if got := e.counts("", "hot")["hot"].Comments; got != n {
		t.Errorf("%d comments, want %d", got, n)
	}
}

// TestBuildThroughPubSub builds the function as deployed (Build on an
// instance's clients, the Pub/Sub emulator's counter topic) and checks that
// a post and a sweep reach the counter subscription and count, and that
// RATE_LIMIT_COMMENTS applies and RATE_LIMITS=off lifts it.
func TestBuildThroughPubSub(t *testing.T) {
	t.Parallel()
	is, err := issuer()
	if err != nil {
		t.Fatal(err)
	}
	jwks := newJWKS(t, is)
	for _, limits := range []string{"on", "off"} {
		cfg := emulatortest.New(t,
			emulatortest.WithEnv("AUTH_AUDIENCE", audience),
			emulatortest.WithEnv("AUTH_JWKS_URL", jwks),
			emulatortest.WithEnv("RATE_LIMIT_COMMENTS", "6"), // 3 at once, then one every 15 s
			emulatortest.WithEnv("RATE_LIMITS", limits))
		ctx := context.Background()
		clients, err := host.New(ctx, cfg, host.NeedSpanner|host.NeedBigtable|host.NeedPubSub|host.NeedVerifier)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { clients.Close() })
		deps, err := commentsfn.Build(ctx, clients)
		if err != nil {
			t.Fatal(err)
		}
		// The sweep below is the Moderation function's, built as deployed too.
		mdeps, err := moderationfn.Build(clients)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/", commentsfn.New(deps))
		mux.Handle("/v1/moderation/", moderationfn.New(mdeps))
		e := &env{t: t, cfg: cfg, issuer: is}
		srv := newServer(t, mux)
		e.url = srv
		var ids []string
		for i := 0; i < 5; i++ {
			r := e.do("POST", "/v1/videos/vid/comments", e.token("alice"), fmt.Sprintf(`{"text":"hi %d"}`, i))
			switch {
			case limits == "on" && i >= 3:
				apitest.CheckError(t, "over the limit", r, 429, "RESOURCE_EXHAUSTED", errs.RateLimited)
				if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
					t.Errorf("429 without Retry-After: %v", r.Header)
				}
				continue
			case r.Code != 201:
				t.Fatalf("RATE_LIMITS=%s post %d: %d %s", limits, i, r.Code, r.Body)
			}
			var c commentJSON
			apitest.DecodeStrict(t, r.Body, &c)
			ids = append(ids, c.ID)
		}
		e.do("POST", "/v1/moderation/spam", e.moderator("mod"), map[string]any{"commentIds": ids[:2]}).Want(t, 200, "spam")

		// The counter subscription (a pull subscription in this world) holds
		// one message per post and one for the sweep; applied, they count.
		sub := clients.PubSub.Subscriber("counter-apply")
		var got []events.Event
		var mu sync.Mutex
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = sub.Receive(sctx, func(_ context.Context, m *pubsub.Message) {
			msg, err := events.Decode(m.Data)
			if err != nil {
				t.Errorf("message %s: %v", m.ID, err)
			}
			m.Ack()
			mu.Lock()
			defer mu.Unlock()
			got = append(got, msg.Events...)
			if len(got) >= len(ids)+1 {
				cancel()
			}
		})
		cancel()
		if err != nil && ctx.Err() == nil && len(got) < len(ids)+1 {
			t.Fatalf("receive: %v", err)
		}
		if len(got) != len(ids)+1 {
			t.Fatalf("RATE_LIMITS=%s: %d events on the counter topic, want %d", limits, len(got), len(ids)+1)
		}
		db := spannerdb.Wrap(clients.Spanner, cfg)
		if _, err := outboxstore.New(db).Apply(ctx, got); err != nil {
			t.Fatal(err)
		}
		c, err := countstore.New(db).Counts(ctx, []string{"vid"}, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(len(ids) - 2); c.Values["vid"].Comments != want {
			t.Errorf("RATE_LIMITS=%s: %d comments counted, want %d", limits, c.Values["vid"].Comments, want)
		}
		raw, _ := json.Marshal(got)
		if !strings.Contains(string(raw), `"outbox":true`) {
			t.Errorf("events not from the outbox: %s", raw)
		}
	}
}

// TestSpamMarksAreOnTheRecord: each comment a moderator marks gets an audit
// entry with the moderator, the reason and the comment's author and video;
// a reason too long is a 400; a revoked moderator is refused (403) and a
// moderator over the limit waits (429), and neither marks anything.
func TestSpamMarksAreOnTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{moderation: 6}) // 3 at once, then one every 15 s
	a := e.post("alice", "vid", "", "buy now")
	b := e.post("bob", "vid2", "", "buy later")
	spam := "/v1/moderation/spam"
	apitest.CheckError(t, "reason too long", e.do("POST", spam, e.moderator("mod"),
		map[string]any{"commentIds": []string{a.ID}, "reason": strings.Repeat("x", 501)}), 400, "INVALID_ARGUMENT", errs.InvalidValue)
	e.do("POST", spam, e.moderator("mod"), map[string]any{"commentIds": []string{a.ID, b.ID, "unknown"}, "reason": "link farm"}).
		Want(t, 200, "spam with a reason")
	trail := moderationstore.New(e.db, moderationstore.Gate{})
	es, _, err := trail.List(context.Background(), moderation.Filter{VideoID: "vid"}, nil, 10)
	if err != nil || len(es) != 1 {
		t.Fatalf("vid's trail: %+v %v", es, err)
	}
	if x := es[0]; x.Action != moderation.ActionSpam || x.Actor != "mod" || x.ActorKind != moderation.ActorModerator ||
		x.UserID != "alice" || x.CommentID != a.ID || x.Reason != "link farm" || !x.Changed {
		t.Errorf("entry %+v", x)
	}
	if es, _, _ := trail.List(context.Background(), moderation.Filter{UserID: "bob"}, nil, 10); len(es) != 1 || es[0].CommentID != b.ID {
		t.Errorf("bob's trail: %+v", es)
	}

	c := e.post("carol", "vid", "", "third")
	if _, err := trail.Revoke(context.Background(), "mod", "ops", "stolen token"); err != nil {
		t.Fatal(err)
	}
	apitest.CheckError(t, "revoked moderator", e.do("POST", spam, e.moderator("mod"), map[string]any{"commentIds": []string{c.ID}}), 403, "PERMISSION_DENIED", errs.ModeratorRevoked)
	// The third call of mod2 at once passes (the refused one above was
	// mod's), the fourth waits.
	for i := range 3 {
		e.do("POST", spam, e.moderator("mod2"), map[string]any{"commentIds": []string{"unknown"}}).Want(t, 200, fmt.Sprint("call ", i))
	}
	r := e.do("POST", spam, e.moderator("mod2"), map[string]any{"commentIds": []string{c.ID}})
	apitest.CheckError(t, "over the limit", r, 429, "RESOURCE_EXHAUSTED", errs.RateLimited)
	if es, _, _ := trail.List(context.Background(), moderation.Filter{UserID: "carol"}, nil, 10); len(es) != 0 {
		t.Errorf("refused calls wrote %+v", es)
	}
	if got := e.list("/v1/videos/vid/comments"); len(got.Comments) != 1 || got.Comments[0].ID != c.ID {
		t.Errorf("carol's comment after refused marks: %+v", got)
	}
}
