package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/auth"
	"github.com/videngage/engagement/shared/errs"
)

// exportDoc is the export's body as a test reads it.
type exportDoc struct {
	Reactions []struct {
		ContentID string `json:"contentId"`
		Reaction  string `json:"reaction"`
	} `json:"reactions"`
	Comments []struct {
		ID       string `json:"id"`
		ParentID string `json:"parentId"`
		Text     string `json:"text"`
		Status   string `json:"status"`
	} `json:"comments"`
	History []struct {
		VideoID string `json:"videoId"`
	} `json:"history"`
	Settings struct {
		Paused           bool `json:"paused"`
		AutoDeleteMonths int  `json:"autoDeleteMonths"`
	} `json:"settings"`
}

// export reads the caller's export (client.do checks it against docs/openapi.yaml).
func export(t *testing.T, c client) exportDoc {
	t.Helper()
	code, _, body := c.do("GET", "/v1/me/export", "")
	if code != 200 {
		t.Fatalf("GET /v1/me/export: %d %s", code, body)
	}
	var doc exportDoc
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("export is not one JSON document: %v", err)
	}
	return doc
}

// TestAccountExport: through the whole stack, the export holds what the
// user did — reactions, comments of every status, the history once applied,
// the settings — and nobody else's.
func TestAccountExport(t *testing.T) {
	base := startLocal(t)
	carol := client{t: t, base: base, token: token(t, base, "export-carol")}
	dave := client{t: t, base: base, token: token(t, base, "export-dave")}

	for path, body := range map[string]string{
		"/v1/reactions/exp-a": `{"reaction":"like"}`,
		"/v1/reactions/exp-b": `{"reaction":"dislike"}`,
	} {
		if code, _, resp := carol.do("PUT", path, body); code != 200 {
			t.Fatalf("PUT %s: %d %s", path, code, resp)
		}
	}
	if code, _, resp := dave.do("PUT", "/v1/reactions/exp-c", `{"reaction":"like"}`); code != 200 {
		t.Fatalf("dave's like: %d %s", code, resp)
	}
	top := postComment(t, base, carol.token, "exp-a")
	gone := postComment(t, base, carol.token, "exp-a")
	if code, _, resp := carol.do("DELETE", "/v1/comments/"+gone, ""); code != 204 {
		t.Fatalf("delete: %d %s", code, resp)
	}
	postComment(t, base, dave.token, "exp-a")
	if code, _, resp := carol.do("PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":36}`); code != 200 {
		t.Fatalf("settings: %d %s", code, resp)
	}
	for _, v := range []string{"exp-a", "exp-b"} {
		if code, _, resp := carol.do("POST", "/v1/history", `{"videoId":"`+v+`","positionSeconds":7}`); code != 202 {
			t.Fatalf("watch: %d %s", code, resp)
		}
	}

	var doc exportDoc
	deadline := time.Now().Add(20 * time.Second)
	for doc = export(t, carol); len(doc.History) < 2; doc = export(t, carol) {
		if time.Now().After(deadline) {
			t.Fatalf("the watches are not in the export within 20 s: %+v", doc.History)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var reactions, comments, watched []string
	for _, r := range doc.Reactions {
		reactions = append(reactions, r.ContentID+"="+r.Reaction)
	}
	for _, c := range doc.Comments {
		comments = append(comments, c.ID+"="+c.Status)
	}
	for _, e := range doc.History {
		watched = append(watched, e.VideoID)
	}
	slices.Sort(comments)
	slices.Sort(watched)
	wantComments := []string{top + "=visible", gone + "=deleted"}
	slices.Sort(wantComments)
	if strings.Join(reactions, ",") != "exp-a=like,exp-b=dislike" {
		t.Errorf("reactions %v", reactions)
	}
	if !slices.Equal(comments, wantComments) {
		t.Errorf("comments %v, want %v", comments, wantComments)
	}
	if strings.Join(watched, ",") != "exp-a,exp-b" {
		t.Errorf("history %v", watched)
	}
	if doc.Settings.AutoDeleteMonths != 36 || doc.Settings.Paused {
		t.Errorf("settings %+v", doc.Settings)
	}
}

// counts reads the public counts of ids (a map of id to its counts).
func counts(t *testing.T, base string, ids string) map[string]map[string]int64 {
	t.Helper()
	code, _, body := client{t: t, base: base}.do("GET", "/v1/counts?ids="+ids, "")
	if code != 200 {
		t.Fatalf("counts: %d %s", code, body)
	}
	var v struct {
		Counts map[string]map[string]int64 `json:"counts"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	return v.Counts
}

// waitCounts waits until the public counts of each id have the wanted
// fields, and fails after 30 s.
func waitCounts(t *testing.T, base string, want map[string]map[string]int64) {
	t.Helper()
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := counts(t, base, strings.Join(ids, ","))
		var diffs []string
		for id, fields := range want {
			for f, n := range fields {
				if got[id][f] != n {
					diffs = append(diffs, fmt.Sprintf("%s.%s=%d, want %d", id, f, got[id][f], n))
				}
			}
		}
		if len(diffs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("counts not as wanted within 30 s: %v", diffs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestAccountErasure: DELETE /v1/me takes the user's reactions and
// comments out of the counts exactly once (a top-level comment with the
// replies others wrote under it), refuses the user's writes while it runs,
// leaves the views, erases the history and settings, and a second DELETE
// changes nothing; a reconciliation afterwards corrects nothing.
func TestAccountErasure(t *testing.T) {
	// The wait before the views' claims go: short here, so that the
	// erasure is done within the test.
	t.Setenv("ERASURE_SETTLE", "3s")
	base := startLocal(t)
	// Accounts the issuer's records hold (accountAge), as Identity
	// Platform's do: the erasure deletes eve's.
	eve := client{t: t, base: base, token: tokenFor(t, base, url.Values{"uid": {"erase-eve"}, "accountAge": {"48h"}})}
	frank := client{t: t, base: base, token: tokenFor(t, base, url.Values{"uid": {"erase-frank"}, "accountAge": {"48h"}})}
	accounts := auth.NewAccountRecordsWith(http.DefaultClient, base+"/identitytoolkit.googleapis.com", os.Getenv("GOOGLE_CLOUD_PROJECT"))
	held := func() map[string]time.Time {
		t.Helper()
		got, err := accounts.Created(context.Background(), []string{"erase-eve", "erase-frank"})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := held(); len(got) != 2 {
		t.Fatalf("accounts before the erasure: %v, want eve's and frank's", got)
	}
	must := func(c client, method, path, body string, want int) string {
		t.Helper()
		code, _, resp := c.do(method, path, body)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, resp, want)
		}
		return resp
	}
	must(eve, "PUT", "/v1/reactions/er-a", `{"reaction":"like"}`, 200)
	must(eve, "PUT", "/v1/reactions/er-b", `{"reaction":"dislike"}`, 200)
	must(frank, "PUT", "/v1/reactions/er-a", `{"reaction":"like"}`, 200)
	evesTop := postComment(t, base, eve.token, "er-v")
	franksTop := postComment(t, base, frank.token, "er-v")
	for i, reply := range []struct {
		c      client
		parent string
	}{{frank, evesTop}, {frank, evesTop}, {eve, franksTop}} {
		must(reply.c, "POST", "/v1/videos/er-v/comments", fmt.Sprintf(`{"text":"reply %d","parentId":%q}`, i, reply.parent), 201)
	}
	must(eve, "PUT", "/v1/reactions/"+franksTop, `{"reaction":"like"}`, 200)
	must(eve, "POST", "/v1/history", `{"videoId":"er-v","positionSeconds":3}`, 202)
	must(eve, "PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":3}`, 200)
	waitCounts(t, base, map[string]map[string]int64{
		"er-a": {"likes": 2}, "er-b": {"dislikes": 1},
		"er-v":    {"comments": 5, "threads": 2, "views": 1, "uniqueViewers": 1},
		evesTop:   {"replies": 2},
		franksTop: {"replies": 1, "likes": 1},
	})

	must(eve, "DELETE", "/v1/me", "", 202)
	// Refused while it runs (it waits at least ERASURE_SETTLE): nothing
	// written now could be left behind.
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/reactions/er-c", `{"reaction":"like"}`},
		{"POST", "/v1/videos/er-v/comments", `{"text":"too late"}`},
		{"POST", "/v1/history", `{"videoId":"er-w"}`},
		{"PUT", "/v1/history/settings", `{"paused":true,"autoDeleteMonths":0}`},
	} {
		code, hdr, body := eve.do(w.method, w.path, w.body)
		checkAnswer(t, w.method+" "+w.path+" while erasing", code, hdr, body, 403, errs.AccountErasing)
	}
	// Others are not affected.
	must(frank, "PUT", "/v1/reactions/er-c", `{"reaction":"like"}`, 200)

	waitCounts(t, base, map[string]map[string]int64{
		"er-a": {"likes": 1}, "er-b": {"dislikes": 0}, "er-c": {"likes": 1},
		// eve's comment took frank's two replies with it; eve's reply left
		// frank's comment. Views and viewers stay.
		"er-v":    {"comments": 1, "threads": 1, "views": 1, "uniqueViewers": 1},
		evesTop:   {"replies": 0},
		franksTop: {"replies": 0, "likes": 0},
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		doc := export(t, eve)
		if len(doc.Reactions)+len(doc.Comments)+len(doc.History) == 0 && doc.Settings.AutoDeleteMonths == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export is not empty 60 s after the erasure: %+v", doc)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Done once eve may write again.
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, hdr, _ := eve.do("PUT", "/v1/history/settings", `{"paused":false,"autoDeleteMonths":0}`)
		if code == 200 {
			break
		}
		if (code != 403 && code != 429) || time.Now().After(deadline) {
			t.Fatalf("after the erasure, eve's settings: %d", code)
		}
		// Every try is one of eve's writes, limited as any: past the
		// limit, wait as the answer says.
		wait := 300 * time.Millisecond
		if s, err := strconv.Atoi(hdr.Get("Retry-After")); code == 429 && err == nil {
			wait = time.Duration(s) * time.Second
		}
		time.Sleep(wait)
	}
	// Her Identity Platform account went with it; frank's stays.
	if got := held(); len(got) != 1 || got["erase-frank"].IsZero() {
		t.Errorf("accounts after eve's erasure: %v, want frank's only", got)
	}
	// Replies by others stay, no longer listed under a comment that is gone.
	if code, _, body := frank.do("GET", "/v1/comments/"+evesTop+"/replies", ""); code != 404 {
		t.Errorf("replies of eve's erased comment: %d %s", code, body)
	}
	// Erasing again changes no count.
	must(eve, "DELETE", "/v1/me", "", 202)
	code, _, body := client{t: t, base: base}.do("POST", "/internal/reconcile", "")
	var rep struct{ Checked, Corrected int }
	if code != 200 || json.Unmarshal([]byte(body), &rep) != nil || rep.Corrected != 0 || rep.Checked == 0 {
		t.Errorf("reconciliation after the erasure: %d %s", code, body)
	}
	waitCounts(t, base, map[string]map[string]int64{
		"er-a": {"likes": 1}, "er-b": {"dislikes": 0}, "er-v": {"comments": 1, "threads": 1, "views": 1}, franksTop: {"replies": 0},
	})
}

// TestAccountExportPrepared: through the whole stack, with the bound
// lowered to one item, the export of an account over it is answered 202,
// published on account-exports, pushed by the Pub/Sub emulator to
// PrepareExport, which writes it to the exports bucket, and then handed
// over by a URL whose download is the account's document.
func TestAccountExportPrepared(t *testing.T) {
	t.Setenv("EXPORT_ASYNC_ABOVE", "1")
	base := startLocal(t)
	erin := client{t: t, base: base, token: token(t, base, "export-erin")}
	for _, item := range []string{"prep-a", "prep-b"} {
		if code, _, resp := erin.do("PUT", "/v1/reactions/"+item, `{"reaction":"like"}`); code != 200 {
			t.Fatalf("PUT %s: %d %s", item, code, resp)
		}
	}
	code, _, body := erin.do("GET", "/v1/me/export", "")
	if code != 202 {
		t.Fatalf("over the bound: %d %s; want 202", code, body)
	}
	var link struct {
		URL string `json:"url"`
	}
	for deadline := time.Now().Add(30 * time.Second); code != 200; code, _, body = erin.do("GET", "/v1/me/export", "") {
		if code != 202 || time.Now().After(deadline) {
			t.Fatalf("while prepared: %d %s; want 202 until a 200 within 30 s", code, body)
		}
		time.Sleep(200 * time.Millisecond) // polling the condition, as a client does
	}
	if err := json.Unmarshal([]byte(body), &link); err != nil || link.URL == "" {
		t.Fatalf("200 without a link: %v %s", err, body)
	}
	resp, err := http.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc exportDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("download: %s, %v", resp.Status, err)
	}
	var reactions []string
	for _, r := range doc.Reactions {
		reactions = append(reactions, r.ContentID+"="+r.Reaction)
	}
	if want := []string{"prep-a=like", "prep-b=like"}; !slices.Equal(reactions, want) {
		t.Errorf("the prepared export's reactions are %v, want %v", reactions, want)
	}
}
