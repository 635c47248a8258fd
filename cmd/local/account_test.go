package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/httpx/apitest"
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

// export reads the caller's export, checked against docs/openapi.yaml.
func export(t *testing.T, c client) exportDoc {
	t.Helper()
	code, hdr, body := c.do("GET", "/v1/me/export", "")
	checkAPI(t, "GET", "/v1/me/export", code, hdr, body)
	if code != 200 {
		t.Fatalf("GET /v1/me/export: %d %s", code, body)
	}
	var doc exportDoc
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("export is not one JSON document: %v", err)
	}
	return doc
}

func checkAPI(t *testing.T, method, path string, code int, hdr http.Header, body string) {
	t.Helper()
	if err := apitest.Check(method, path, code, hdr, []byte(body)); err != nil {
		t.Error(err)
	}
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
