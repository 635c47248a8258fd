package reactionsfn

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/pagetoken"
	"github.com/videngage/engagement/shared/reaction"
)

// verifier takes the bearer token as the user id; "mod:" makes a moderator.
type verifier struct{}

func (verifier) FromRequest(r *http.Request) (auth.User, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		return auth.User{}, httpx.Unauthenticated("a token is required")
	}
	id, mod := strings.CutPrefix(tok, "mod:")
	return auth.User{ID: id, Moderator: mod}, nil
}

// flagList serves a fixed listing, newest first, as the store pages it.
type flagList struct{ flags []moderation.Flag }

func (f *flagList) Get(context.Context, string, []string) (map[string]reaction.State, error) {
	return nil, nil
}

func (f *flagList) SetFlagged(context.Context, []string, bool) (int, error) { return 0, nil }

func (f *flagList) ListFlagged(_ context.Context, after *moderation.Cursor, limit int) ([]moderation.Flag, *moderation.Cursor, error) {
	start := 0
	if after != nil {
		for i, fl := range f.flags {
			if fl.UserID == after.UserID && fl.FlaggedAt.Equal(after.At) {
				start = i + 1
			}
		}
	}
	end := min(start+limit, len(f.flags))
	page := f.flags[start:end]
	if end == len(f.flags) {
		return page, nil, nil
	}
	last := page[len(page)-1]
	return page, &moderation.Cursor{At: last.FlaggedAt, UserID: last.UserID}, nil
}

func TestListFlaggedPagesAndMatchesTheDocument(t *testing.T) {
	at := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	ev := &moderation.Evidence{Items: []moderation.Item{{ContentID: "v1", Reaction: "like"}}, WindowStart: at.Add(-time.Hour),
		WindowEnd: at.Add(-50 * time.Minute), GroupSize: 40, YoungAccounts: 38}
	store := &flagList{flags: []moderation.Flag{
		{UserID: "ring-1", Reason: moderation.Automatic, FlaggedAt: at, Evidence: ev},
		{UserID: "ring-0", Reason: moderation.Automatic, FlaggedAt: at, Evidence: ev},
		{UserID: "spammer", Reason: moderation.ByModerator, FlaggedAt: at.Add(-time.Hour)},
		{UserID: "user with spaces/and slashes", Reason: moderation.ByModerator, FlaggedAt: at.Add(-2 * time.Hour)},
		{UserID: "old", Reason: moderation.ByModerator, FlaggedAt: time.Unix(0, 0).UTC()},
	}}
	h := New(Deps{Verifier: verifier{}, Store: store, Tokens: pagetoken.NewSigner("secret")})
	get := func(token, path string) (int, http.Header, []byte) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if err := apitest.Check(http.MethodGet, path, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Error(err)
		}
		return rec.Code, rec.Header(), rec.Body.Bytes()
	}

	var got []FlagBody
	path := "/v1/moderation/flagged-users?pageSize=2"
	for pages := 0; ; pages++ {
		code, hdr, body := get("mod:m", path)
		if code != 200 || hdr.Get("Cache-Control") != "private, no-store" {
			t.Fatalf("%s: %d %v %s", path, code, hdr, body)
		}
		var page FlagPageBody
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Users) > 2 || pages > 5 {
			t.Fatalf("page %d: %s", pages, body)
		}
		got = append(got, page.Users...)
		if page.NextPageToken == "" {
			break
		}
		path = "/v1/moderation/flagged-users?pageSize=2&pageToken=" + url.QueryEscape(page.NextPageToken)
	}
	if len(got) != len(store.flags) {
		t.Fatalf("listed %d flags, want %d: %+v", len(got), len(store.flags), got)
	}
	for i, f := range store.flags {
		g := got[i]
		if g.UserID != f.UserID || g.Reason != string(f.Reason) || !g.FlaggedAt.Equal(f.FlaggedAt) || (g.Evidence == nil) != (f.Evidence == nil) {
			t.Errorf("flag %d: %+v, want %+v", i, g, f)
		}
	}
	if got[0].Evidence.GroupSize != 40 || got[0].Evidence.Items[0].ContentID != "v1" {
		t.Errorf("evidence %+v", got[0].Evidence)
	}

	// A token of another listing, an altered one, bad page sizes: 400.
	other := pagetoken.NewSigner("secret").Encode("comment-page\x00video\x00v1", moderation.Cursor{At: at, UserID: "x"}.String())
	for _, q := range []string{"pageToken=" + url.QueryEscape(other), "pageToken=abc.def", "pageSize=0", "pageSize=101", "pageSize=x"} {
		if code, _, body := get("mod:m", "/v1/moderation/flagged-users?"+q); code != 400 || !strings.Contains(string(body), "INVALID_ARGUMENT") {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
	// Moderators only.
	if code, _, _ := get("alice", "/v1/moderation/flagged-users"); code != 403 {
		t.Errorf("a user: %d, want 403", code)
	}
	if code, _, _ := get("", "/v1/moderation/flagged-users"); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
}
