package accountfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/accounttest"
	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/comment"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/history"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/reaction"
)

type fakeVerifier struct{}

func (fakeVerifier) FromRequest(r *http.Request) (auth.User, error) {
	uid := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if uid == "" {
		return auth.User{}, httpx.Unauthenticated(errs.TokenMissing, "a token is required")
	}
	return auth.User{ID: uid}, nil
}

// account is a generated account of n reactions, comments and history
// entries, served a page at a time as the stores do. written reports how
// many bytes of the answer were out when each page was asked for.
type fakeAccount struct {
	reactions, comments, entries int
	written                      func() int
	maxPage                      int
	// bytesBeforeLastPage is what had been written when the last history
	// page was read.
	bytesBeforeLastPage int
	failHistoryAt       int // fail the history page starting at this index (0: never)
	trail               fakeTrail
	exports             fakeExports
}

// fakeTrail is the moderation audit trail about the account: n entries,
// newest first, served a page at a time; users records whose entries were
// asked for.
type fakeTrail struct {
	n     int
	users []string
}

func (f *fakeTrail) List(_ context.Context, fl moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error) {
	f.users = append(f.users, fl.UserID)
	start := 0
	if after != nil {
		start = accounttest.Next("e%06d", after.ID)
	}
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []moderation.Entry
	for i := start; i < f.n && len(out) < limit; i++ {
		e := moderation.Entry{ID: fmt.Sprintf("e%06d", i), Time: base.Add(-time.Duration(i) * time.Second), UserID: fl.UserID, Changed: true}
		switch i % 3 {
		case 0:
			ev := moderation.Evidence{Items: []moderation.Item{{ContentID: "v1", Reaction: "like"}}, WindowStart: base.Add(-time.Hour), WindowEnd: base, GroupSize: 12, YoungAccounts: 10}
			e.Action, e.Actor, e.ActorKind, e.Reason, e.Evidence = moderation.ActionFlag, moderation.DetectorGroups, moderation.ActorAutomatic, ev.Summary(), &ev
		case 1:
			e.Action, e.Actor, e.ActorKind, e.Reason = moderation.ActionUnflag, "mod-1", moderation.ActorModerator, "a real fan"
		default:
			e.Action, e.Actor, e.ActorKind, e.CommentID, e.VideoID = moderation.ActionSpam, "mod-2", moderation.ActorModerator, "c1", "v1"
		}
		out = append(out, e)
	}
	if start+len(out) < f.n {
		last := out[len(out)-1]
		return out, &moderation.EntryCursor{Time: last.Time, ID: last.ID}, nil
	}
	return out, nil, nil
}

func (a *fakeAccount) ListByUser(_ context.Context, _ string, after string, limit int) ([]reaction.UserReaction, error) {
	if a.maxPage == 0 {
		a.exports.runningAtRead = a.exports.running
	}
	a.maxPage = max(a.maxPage, limit)
	start := accounttest.Next("v%06d", after)
	var out []reaction.UserReaction
	for i := start; i < a.reactions && len(out) < limit; i++ {
		out = append(out, reaction.UserReaction{ContentID: fmt.Sprintf("v%06d", i),
			State: reaction.State{Reaction: reaction.Like, Version: 1}, UpdateTime: time.Unix(1700000000, 0)})
	}
	return out, nil
}

func (a *fakeAccount) ListByAuthor(_ context.Context, user, after string, limit int) ([]comment.Comment, error) {
	a.maxPage = max(a.maxPage, limit)
	start := accounttest.Next("c%06d", after)
	var out []comment.Comment
	for i := start; i < a.comments && len(out) < limit; i++ {
		st := comment.Visible
		if i%3 == 0 {
			st = comment.Deleted
		}
		out = append(out, comment.Comment{ID: fmt.Sprintf("c%06d", i), VideoID: "v1", AuthorID: user, Text: "text",
			Status: st, CreateTime: time.Unix(1700000000, 0), UpdateTime: time.Unix(1700000001, 0)})
	}
	return out, nil
}

func (a *fakeAccount) List(_ context.Context, _ string, after *history.Cursor, _ time.Time, size int) (history.Page, error) {
	a.maxPage = max(a.maxPage, size)
	start := 0
	if after != nil {
		start = accounttest.Next("h%06d", after.VideoID)
	}
	if a.failHistoryAt > 0 && start >= a.failHistoryAt {
		return history.Page{}, fmt.Errorf("%w: bigtable is down", errs.ErrBackendUnavailable)
	}
	var p history.Page
	for i := start; i < a.entries && len(p.Entries) < size; i++ {
		p.Entries = append(p.Entries, history.Entry{VideoID: fmt.Sprintf("h%06d", i), WatchedAt: time.Unix(1700000000-int64(i), 0), PositionSeconds: 3})
	}
	if n := start + len(p.Entries); n < a.entries {
		last := p.Entries[len(p.Entries)-1]
		p.Next = &history.Cursor{At: last.WatchedAt, VideoID: last.VideoID}
	} else {
		a.bytesBeforeLastPage = a.written()
	}
	return p, nil
}

func (a *fakeAccount) Get(context.Context, string) (history.Settings, error) {
	return history.Settings{Paused: true, AutoDeleteMonths: 18}, nil
}

// countingWriter is an http.ResponseWriter that counts the body bytes.
type countingWriter struct {
	*httptest.ResponseRecorder
	n int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n += len(b)
	return w.ResponseRecorder.Write(b)
}

func newHandler(a *fakeAccount) http.Handler {
	return New(Deps{Verifier: fakeVerifier{}, Reactions: a, Comments: a, History: a, Settings: a, Moderation: &a.trail, Exports: &a.exports})
}

// fakeExports admits exports and records them; refuse, when set, is the
// answer to Begin.
type fakeExports struct {
	refuse        error
	begun, ended  []string // users
	running       int      // begun and not ended
	runningAtRead int      // running when the export read its first page
}

func (f *fakeExports) Begin(_ context.Context, user string, timeout time.Duration) (string, error) {
	if f.refuse != nil {
		return "", f.refuse
	}
	if timeout <= 0 {
		return "", errors.New("no deadline for the export")
	}
	f.begun = append(f.begun, user)
	f.running++
	return "lease-" + user, nil
}

func (f *fakeExports) End(_ context.Context, user, lease string) error {
	if lease != "lease-"+user {
		return fmt.Errorf("End(%q, %q): not the lease Begin gave", user, lease)
	}
	f.ended = append(f.ended, user)
	f.running--
	return nil
}

// TestExportLimited: the export is admitted through the limit before it
// reads anything, and marked over when done; refused, it is a 429 with
// Retry-After in the error format, and nothing is read.
func TestExportLimited(t *testing.T) {
	a := &fakeAccount{reactions: 3, comments: 2, entries: 5, written: func() int { return 0 }}
	req := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/v1/me/export", nil)
		r.Header.Set("Authorization", "Bearer alice")
		newHandler(a).ServeHTTP(w, r)
		return w
	}
	if w := req(); w.Code != 200 {
		t.Fatalf("admitted export: %d %s", w.Code, w.Body)
	}
	if a.exports.runningAtRead != 1 || a.exports.running != 0 || len(a.exports.ended) != 1 || a.exports.ended[0] != "alice" {
		t.Errorf("export gate %+v: want alice's export begun before the first read and ended after", a.exports)
	}
	for _, refusal := range []*errs.RateLimitedError{
		{What: "exports at once (one of your account's is running)", RetryAfter: 90 * time.Second},
		{What: "exports a day", RetryAfter: 5 * time.Hour},
	} {
		a.exports.refuse = refusal
		a.maxPage = 0
		w := req()
		if err := apitest.Check("GET", "/v1/me/export", w.Code, w.Header(), w.Body.Bytes()); err != nil {
			t.Errorf("%s: %v", refusal.What, err)
		}
		apitest.CheckError(t, refusal.What, apitest.Answer{Code: w.Code, Header: w.Header(), Body: w.Body.Bytes()}, 429, "RESOURCE_EXHAUSTED", errs.RateLimited)
		if got, want := w.Header().Get("Retry-After"), fmt.Sprint(int(refusal.RetryAfter.Seconds())); got != want {
			t.Errorf("%s: Retry-After %q, want %q", refusal.What, got, want)
		}
		if !strings.Contains(w.Body.String(), refusal.What) {
			t.Errorf("%s: the answer does not say why: %s", refusal.What, w.Body)
		}
		if a.maxPage != 0 {
			t.Errorf("%s: a refused export read the account", refusal.What)
		}
	}
}

// TestExportStreamsALargeAccount: 2,000 reactions, 3,000 comments and
// 100,000 history entries come out as one document that matches the API
// document, read in bounded pages and written while they are read (most of
// the answer is out before the last history page is even asked for).
func TestExportStreamsALargeAccount(t *testing.T) {
	a := &fakeAccount{reactions: 2000, comments: 3000, entries: 100_000, trail: fakeTrail{n: 1200}}
	w := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	a.written = func() int { return w.n }
	req := httptest.NewRequest("GET", "/v1/me/export", nil)
	req.Header.Set("Authorization", "Bearer alice")
	newHandler(a).ServeHTTP(w, req)

	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body.String())
	}
	body := w.Body.Bytes()
	if err := apitest.Check("GET", "/v1/me/export", w.Code, w.Header(), body); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Reactions []json.RawMessage `json:"reactions"`
		Comments  []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"comments"`
		History    []json.RawMessage `json:"history"`
		Moderation []struct {
			ID     string `json:"id"`
			Action string `json:"action"`
			Actor  struct {
				ID, Kind string
			} `json:"actor"`
			UserID string `json:"userId"`
		} `json:"moderation"`
		Settings history.Settings `json:"settings"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("not one JSON document: %v", err)
	}
	if len(doc.Reactions) != 2000 || len(doc.Comments) != 3000 || len(doc.History) != 100_000 {
		t.Errorf("exported %d reactions, %d comments, %d entries; want 2000, 3000, 100000", len(doc.Reactions), len(doc.Comments), len(doc.History))
	}
	if doc.Comments[0].Status != "deleted" || doc.Comments[1].Status != "visible" {
		t.Errorf("comment statuses %q %q, want deleted, visible", doc.Comments[0].Status, doc.Comments[1].Status)
	}
	// The trail's entries about alice, every page of them, in its order.
	if len(doc.Moderation) != 1200 {
		t.Fatalf("exported %d moderation entries, want 1200", len(doc.Moderation))
	}
	if m := doc.Moderation[0]; m.ID != "e000000" || m.Action != "flag" || m.Actor.Kind != "automatic" || m.UserID != "alice" {
		t.Errorf("first moderation entry %+v", m)
	}
	if m := doc.Moderation[1199]; m.ID != "e001199" || m.Action != "spam" || m.Actor.ID != "mod-2" {
		t.Errorf("last moderation entry %+v", m)
	}
	for _, u := range a.trail.users {
		if u != "alice" {
			t.Errorf("the export read the trail of %q, not the caller's", u)
		}
	}
	if doc.Settings != (history.Settings{Paused: true, AutoDeleteMonths: 18}) {
		t.Errorf("settings %+v", doc.Settings)
	}
	if a.maxPage > 1000 {
		t.Errorf("a page of %d items was read; pages are at most 1000", a.maxPage)
	}
	if a.bytesBeforeLastPage < len(body)*9/10 {
		t.Errorf("%d of %d bytes were written before the last page was read: the answer is not streamed", a.bytesBeforeLastPage, len(body))
	}
	if got := w.Header().Get("Cache-Control"); got != "private, no-store" {
		t.Errorf("Cache-Control %q", got)
	}
}

// TestExportOfAnEmptyAccount: nothing held is empty arrays and the default
// settings, still a valid document.
func TestExportOfAnEmptyAccount(t *testing.T) {
	a := &fakeAccount{}
	w := httptest.NewRecorder()
	a.written = func() int { return w.Body.Len() }
	req := httptest.NewRequest("GET", "/v1/me/export", nil)
	req.Header.Set("Authorization", "Bearer nobody")
	newHandler(a).ServeHTTP(w, req)
	if err := apitest.Check("GET", "/v1/me/export", w.Code, w.Header(), w.Body.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(w.Body.String()); !strings.HasPrefix(got, `{"kind":"export","reactions":[],"comments":[],"history":[],"moderation":[],"settings":{`) {
		t.Errorf("empty export: %s", got)
	}
}

// TestExportFailures: no token is 401; a backend down before the answer
// starts is 503 with the error body; one that fails midway aborts the
// connection, so the client cannot take the cut-off document for a whole one.
func TestExportFailures(t *testing.T) {
	t.Run("no token", func(t *testing.T) {
		w := httptest.NewRecorder()
		newHandler(&fakeAccount{}).ServeHTTP(w, httptest.NewRequest("GET", "/v1/me/export", nil))
		if err := apitest.Check("GET", "/v1/me/export", w.Code, w.Header(), w.Body.Bytes()); err != nil || w.Code != 401 {
			t.Errorf("%d %v", w.Code, err)
		}
	})
	t.Run("midway", func(t *testing.T) {
		a := &fakeAccount{reactions: 10, entries: 5000, failHistoryAt: 2000}
		a.written = func() int { return 0 }
		srv := httptest.NewServer(httpx.Recover(newHandler(a)))
		defer srv.Close()
		req, _ := http.NewRequest("GET", srv.URL+"/v1/me/export", nil)
		req.Header.Set("Authorization", "Bearer alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("the body ended cleanly (%d bytes) although the history failed midway", len(body))
		}
		if errors.Is(err, io.EOF) || json.Valid(body) {
			t.Errorf("cut-off body is valid JSON or ended with EOF: %v", err)
		}
	})
}

func (a *fakeAccount) MarkErasing(context.Context, string) error { return nil }
