package moderationfn

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/internal/apitest"
	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/httpx"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/pagetoken"
)

// verifier takes the bearer token as the user id; "mod:" makes a moderator.
type verifier struct{}

func (verifier) FromRequest(r *http.Request) (auth.User, error) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		return auth.User{}, httpx.Unauthenticated(errs.TokenMissing, "a token is required")
	}
	id, mod := strings.CutPrefix(tok, "mod:")
	return auth.User{ID: id, Moderator: mod}, nil
}

// fakeStore is the flags of a flagList and the gate and trail of a gate.
type fakeStore struct {
	*flagList
	*gate
}

// flagList serves a fixed listing, newest first, as the store pages it.
type flagList struct {
	flags     []moderation.Flag
	decisions []moderation.Decision
}

// gate refuses revoked moderators and those it limits, as the store's
// gate would, and serves a fixed trail, newest first, as the store pages
// it; filters records what each listing asked for.
type gate struct {
	revoked, limited map[string]bool
	trail            []moderation.Entry
	filters          []moderation.Filter
}

func (g *gate) Admit(_ context.Context, moderator string) error {
	switch {
	case g.revoked[moderator]:
		return fmt.Errorf("moderationstore.Admit: %w", moderation.ErrRevoked)
	case g.limited[moderator]:
		return &errs.RateLimitedError{What: "moderation calls", RetryAfter: 1500 * time.Millisecond}
	}
	return nil
}

func (g *gate) List(_ context.Context, f moderation.Filter, after *moderation.EntryCursor, limit int) ([]moderation.Entry, *moderation.EntryCursor, error) {
	g.filters = append(g.filters, f)
	start := 0
	if after != nil {
		for i, e := range g.trail {
			if e.ID == after.ID {
				start = i + 1
			}
		}
	}
	end := min(start+limit, len(g.trail))
	page := g.trail[start:end]
	if end == len(g.trail) {
		return page, nil, nil
	}
	last := page[len(page)-1]
	return page, &moderation.EntryCursor{Time: last.Time, ID: last.ID}, nil
}

func (f *flagList) SetFlagged(_ context.Context, d moderation.Decision) (int, error) {
	switch d.Moderator { // the store's gate
	case "gone":
		return 0, fmt.Errorf("moderationstore.SetFlagged: %w", moderation.ErrRevoked)
	case "busy":
		return 0, fmt.Errorf("moderationstore.SetFlagged: %w", &errs.RateLimitedError{What: "moderation calls", RetryAfter: 1500 * time.Millisecond})
	}
	f.decisions = append(f.decisions, d)
	return len(d.UserIDs), nil
}

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
	h := New(Deps{Verifier: verifier{}, Store: fakeStore{store, &gate{}}, Tokens: pagetoken.NewSigner("secret")})
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
	for q, reason := range map[string]errs.Reason{
		"pageToken=" + url.QueryEscape(other): errs.InvalidPageToken,
		"pageToken=abc.def":                   errs.InvalidPageToken,
		"pageSize=0":                          errs.InvalidValue,
		"pageSize=101":                        errs.InvalidValue,
		"pageSize=x":                          errs.InvalidValue,
	} {
		code, hdr, body := get("mod:m", "/v1/moderation/flagged-users?"+q)
		apitest.CheckError(t, q, apitest.Answer{Code: code, Header: hdr, Body: body}, 400, "INVALID_ARGUMENT", reason)
	}
	// Moderators only.
	code, hdr, body := get("alice", "/v1/moderation/flagged-users")
	apitest.CheckError(t, "a user", apitest.Answer{Code: code, Header: hdr, Body: body}, 403, "PERMISSION_DENIED", errs.NotModerator)
	code, hdr, body = get("", "/v1/moderation/flagged-users")
	apitest.CheckError(t, "no token", apitest.Answer{Code: code, Header: hdr, Body: body}, 401, "UNAUTHENTICATED", errs.TokenMissing)
}

// TestModerationActionsPageAndMatchTheDocument: the trail lists a page at a
// time with tokens bound to its filters, every entry kind matches the
// document, and the gate's refusals are 403 and 429.
func TestModerationActionsPageAndMatchTheDocument(t *testing.T) {
	at := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	ev := &moderation.Evidence{Items: []moderation.Item{{ContentID: "v1", Reaction: "like"}}, WindowStart: at.Add(-time.Hour),
		WindowEnd: at.Add(-50 * time.Minute), GroupSize: 40, YoungAccounts: 38}
	g := &gate{revoked: map[string]bool{"gone": true}, limited: map[string]bool{"busy": true}, trail: []moderation.Entry{
		{ID: "e5", Time: at, Action: moderation.ActionRestore, Actor: "ops", ActorKind: moderation.ActorOperator, UserID: "m2", Reason: "new token", Changed: true},
		{ID: "e4", Time: at.Add(-time.Minute), Action: moderation.ActionSpam, Actor: "m1", ActorKind: moderation.ActorModerator, UserID: "u1", CommentID: "c1", VideoID: "v1", Reason: "links", Changed: true},
		{ID: "e3", Time: at.Add(-time.Minute), Action: moderation.ActionUnflag, Actor: "m1", ActorKind: moderation.ActorModerator, UserID: "u2", Changed: false},
		{ID: "e2", Time: at.Add(-time.Hour), Action: moderation.ActionFlag, Actor: moderation.DetectorGroups, ActorKind: moderation.ActorAutomatic, UserID: "u2", Reason: ev.Summary(), Changed: true, Evidence: ev},
		{ID: "e1", Time: at.Add(-2 * time.Hour), Action: moderation.ActionRevoke, Actor: "ops", ActorKind: moderation.ActorOperator, UserID: "m2", Reason: "", Changed: true},
	}}
	store := &flagList{}
	h := New(Deps{Verifier: verifier{}, Store: fakeStore{store, g}, Tokens: pagetoken.NewSigner("secret")})
	do := func(method, token, path, body string) (int, http.Header, []byte) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if err := apitest.Check(method, path, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
			t.Error(err)
		}
		return rec.Code, rec.Header(), rec.Body.Bytes()
	}

	var got []string
	path := "/v1/moderation/actions?pageSize=2&userId=u2"
	for pages := 0; ; pages++ {
		code, hdr, body := do("GET", "mod:m", path, "")
		if code != 200 || hdr.Get("Cache-Control") != "private, no-store" || pages > 5 {
			t.Fatalf("%s: %d %v %s", path, code, hdr, body)
		}
		var page struct {
			Actions []struct {
				ID    string `json:"id"`
				Actor struct {
					Kind string `json:"kind"`
				} `json:"actor"`
			} `json:"actions"`
			NextPageToken string `json:"nextPageToken"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		for _, a := range page.Actions {
			got = append(got, a.ID+":"+a.Actor.Kind)
		}
		if page.NextPageToken == "" {
			break
		}
		// The token opens this listing with these filters only.
		code, hdr, body = do("GET", "mod:m", "/v1/moderation/actions?userId=u1&pageToken="+url.QueryEscape(page.NextPageToken), "")
		apitest.CheckError(t, "a token of userId=u2 with userId=u1", apitest.Answer{Code: code, Header: hdr, Body: body}, 400, "INVALID_ARGUMENT", errs.InvalidPageToken)
		path = "/v1/moderation/actions?pageSize=2&userId=u2&pageToken=" + url.QueryEscape(page.NextPageToken)
	}
	if want := "[e5:operator e4:moderator e3:moderator e2:automatic e1:operator]"; fmt.Sprint(got) != want {
		t.Errorf("listed %v, want %s", got, want)
	}
	if g.filters[0] != (moderation.Filter{UserID: "u2"}) {
		t.Errorf("filter %+v", g.filters[0])
	}
	if code, _, _ := do("GET", "mod:m", "/v1/moderation/actions?videoId=v1", ""); code != 200 || g.filters[len(g.filters)-1] != (moderation.Filter{VideoID: "v1"}) {
		t.Errorf("videoId: %d %+v", code, g.filters[len(g.filters)-1])
	}
	for q, reason := range map[string]errs.Reason{
		"videoId=a.b":       errs.InvalidID,
		"userId=":           errs.InvalidValue,
		"pageSize=0":        errs.InvalidValue,
		"pageToken=abc.def": errs.InvalidPageToken,
	} {
		code, hdr, body := do("GET", "mod:m", "/v1/moderation/actions?"+q, "")
		apitest.CheckError(t, q, apitest.Answer{Code: code, Header: hdr, Body: body}, 400, "INVALID_ARGUMENT", reason)
	}
	code, hdr, body := do("GET", "alice", "/v1/moderation/actions", "")
	apitest.CheckError(t, "a user", apitest.Answer{Code: code, Header: hdr, Body: body}, 403, "PERMISSION_DENIED", errs.NotModerator)
	code, hdr, body = do("GET", "", "/v1/moderation/actions", "")
	apitest.CheckError(t, "no token", apitest.Answer{Code: code, Header: hdr, Body: body}, 401, "UNAUTHENTICATED", errs.TokenMissing)

	// The gate's refusals, on every moderation call of this function.
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/moderation/actions", ""},
		{"GET", "/v1/moderation/flagged-users", ""},
		{"POST", "/v1/moderation/flagged-users", `{"userIds":["u9"],"flagged":false}`},
	}
	for _, c := range calls {
		code, hdr, body := do(c.method, "mod:gone", c.path, c.body)
		apitest.CheckError(t, c.method+" "+c.path+" by a revoked moderator", apitest.Answer{Code: code, Header: hdr, Body: body}, 403, "PERMISSION_DENIED", errs.ModeratorRevoked)
		code, hdr, body = do(c.method, "mod:busy", c.path, c.body)
		apitest.CheckError(t, c.method+" "+c.path+" over the limit", apitest.Answer{Code: code, Header: hdr, Body: body}, 429, "RESOURCE_EXHAUSTED", errs.RateLimited)
		if hdr.Get("Retry-After") != "2" {
			t.Errorf("%s %s over the limit: %d, Retry-After %q", c.method, c.path, code, hdr.Get("Retry-After"))
		}
	}

	// A malformed listing is refused before the gate: not charged to the
	// moderator's limit.
	for _, path := range []string{"/v1/moderation/actions?pageToken=abc.def", "/v1/moderation/flagged-users?pageToken=abc.def",
		"/v1/moderation/actions?videoId=a.b", "/v1/moderation/flagged-users?pageSize=0"} {
		if code, _, body := do("GET", "mod:busy", path, ""); code != 400 {
			t.Errorf("%s over the limit: %d %s, want 400 before the gate", path, code, body)
		}
	}

	// A decision carries the moderator and the reason to the store.
	if code, _, body := do("POST", "mod:m", "/v1/moderation/flagged-users", `{"userIds":["u3"],"flagged":true,"reason":"ring"}`); code != 200 {
		t.Fatalf("flag: %d %s", code, body)
	}
	code, hdr, body = do("POST", "mod:m", "/v1/moderation/flagged-users", `{"userIds":["u3"],"flagged":true,"reason":"`+strings.Repeat("x", 501)+`"}`)
	apitest.CheckError(t, "a reason of 501 characters", apitest.Answer{Code: code, Header: hdr, Body: body}, 400, "INVALID_ARGUMENT", errs.InvalidValue)
	if len(store.decisions) != 1 || store.decisions[0].Moderator != "m" || store.decisions[0].Reason != "ring" || !store.decisions[0].Flagged {
		t.Errorf("decisions %+v", store.decisions)
	}
}
