package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestPlaygroundInBrowser drives the playground in headless Chromium: once
// served by the stack itself, and once from a second origin (another
// loopback port) calling the API cross-origin, as a frontend does — CORS
// preflights, a readable ETag, a 412 on a stale If-Match. It saves a
// screenshot of each page at the end in the test's artifact directory
// (make test keeps them under .artifacts/).
func TestPlaygroundInBrowser(t *testing.T) {
	chrome := chromiumPath(t)
	base := startLocal(t)

	// The second origin serves the same page, pointed at the stack with ?api=.
	other := httptest.NewServer(playgroundHandler())
	t.Cleanup(other.Close)

	browser := startBrowser(t, chrome)
	for _, tc := range []struct{ name, page, user, video string }{
		{"same-origin", base + "/", "alice", "intro"},
		{"cross-origin", other.URL + "/?api=" + url.QueryEscape(base), "bob", "talk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Now()
			// Ids of their own, as the stack's database outlives one test.
			suffix := strconv.FormatInt(time.Now().UnixNano()%(1<<32), 36)
			drivePlayground(t, browser, base, tc.page, tc.name, tc.user+"-"+suffix, tc.video+"-"+suffix)
			t.Logf("%s: %.1f s", tc.name, time.Since(started).Seconds())
		})
	}
}

// chromiumPath finds Debian's Chromium. Without it the browser tests fail,
// as any test whose dependency is missing: they never skip.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("Chromium is not installed and the browser tests need it: install it with `apt-get install -y chromium` (.ci/run does)")
	return ""
}

// startBrowser starts one headless Chromium for the test. The flags keep it
// from reaching for the network (updates, sync, QUIC probes), which stalls
// it on a machine without one.
func startBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	// The first call starts the browser, which lives as long as its context:
	// no timeout here (the allocator bounds the start itself).
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("start Chromium (%s): %v", path, err)
	}
	return browser
}

// page drives one tab. Every wait is for a condition in the page, with a
// deadline; a failed wait reports the page's error banner and request log.
type page struct {
	t   *testing.T
	ctx context.Context // the tab's: each step sets its own deadline
}

func (p page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepWait)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.diagnostics())
	}
}

// waitFor polls a JavaScript condition until it holds.
func (p page) waitFor(what, cond string, timeout time.Duration) {
	p.t.Helper()
	ok, err := chromedp.Run(p.ctx, chromedp.Poll[bool]("!!("+cond+")",
		chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil || !ok {
		p.t.Fatalf("waiting for %s (%s): %v\n%s", what, cond, err, p.diagnostics())
	}
}

func (p page) click(sel string) { p.t.Helper(); p.run("click "+sel, chromedp.Click(chromedp.CSS(sel))) }

func (p page) setValue(sel, v string) {
	p.t.Helper()
	p.run("set "+sel, chromedp.SetValue(chromedp.CSS(sel), v))
}

// eval runs a statement in the page.
func (p page) eval(what, stmt string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepWait)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("("+stmt+", true)")); err != nil {
		p.t.Fatalf("%s: %v\n%s", what, err, p.diagnostics())
	}
}

func (p page) diagnostics() string {
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	banner, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#error.shown") ? document.querySelector("#error .msg").textContent : "(no error shown)"`))
	log, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#log .entry")].slice(0, 12).map(e => e.dataset.method + " " + e.dataset.path + " → " + e.dataset.status + "\n" + e.querySelector("pre.res").textContent.slice(0, 400)).join("\n---\n")`))
	return "page error banner: " + banner + "\nnewest requests in the page's log:\n" + log
}

// js quotes a string for JavaScript.
func js(s string) string { return fmt.Sprintf("%q", s) }

// logged is a condition: the page's log shows a request with this method,
// path prefix and status, and the extra condition on its entry e.
func logged(method, pathPrefix string, status int, extra string) string {
	if extra == "" {
		extra = "true"
	}
	return fmt.Sprintf(`[...document.querySelectorAll("#log .entry")].some(e => e.dataset.method === %s && e.dataset.path.startsWith(%s) && e.dataset.status === "%d" && (%s))`,
		js(method), js(pathPrefix), status, extra)
}

func textIs(sel, want string) string {
	return fmt.Sprintf(`(document.querySelector(%s) || {}).textContent === %s`, js(sel), js(want))
}

func pressed(sel string) string {
	return fmt.Sprintf(`document.querySelector(%s).getAttribute("aria-pressed") === "true"`, js(sel))
}

const (
	stepWait  = 20 * time.Second
	asyncWait = 40 * time.Second // through Pub/Sub push and an event function
)

// drivePlayground signs in, reacts (with the ETag, and once with a stale
// If-Match), comments and replies, has a moderator mark spam and flag and
// unflag an account, and records history with pause, resume and clear — all
// through the page.
func drivePlayground(t *testing.T, browser context.Context, apiBase, pageURL, name, uid, video string) {
	ctx, cancel := chromedp.NewContext(browser)
	defer cancel()

	var mu sync.Mutex
	var exceptions []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			exceptions = append(exceptions, fmt.Sprintf("%s (line %d)", msg, d.LineNumber+1))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range exceptions {
			t.Errorf("uncaught exception in the page: %s", e)
		}
	}()

	p := page{t: t, ctx: ctx}
	sep := "?"
	if strings.Contains(pageURL, "?") {
		sep = "&"
	}
	p.run("open the playground", chromedp.Navigate(pageURL+sep+"video="+video))
	p.waitFor("the page to load its first answers", `document.body.dataset.ready === "true"`, stepWait)

	// Signed out: the public counts.
	p.waitFor("the public counts", logged("GET", "/v1/counts?ids="+video, 200, `e.querySelector("pre.res").textContent.includes("public, max-age")`), stepWait)
	p.waitFor("zero likes", textIs("#count-likes", "0"), stepWait)

	// Sign in through /dev/token.
	p.setValue("#uid", uid)
	p.click("#signin-btn")
	p.waitFor("signed in", `document.body.dataset.signedIn === `+js(uid), stepWait)
	p.waitFor("the token request", logged("GET", "/dev/token?uid="+uid, 200, ""), stepWait)
	p.waitFor("the caller's view of the counts", logged("GET", "/v1/me/counts?ids="+video, 200, `e.querySelector("pre.res").textContent.includes('"viewer"')`), stepWait)
	p.waitFor("the caller's reaction", textIs("#viewer-reaction", "none"), stepWait)

	// Like: the count and the viewer's reaction, and the ETag to send next.
	// The versions (ETags) start at the row's creation time and grow by one
	// per change: the like's is read back, the next ones follow from it.
	device := client{t: t, base: apiBase, token: token(t, apiBase, uid)}
	p.click("#like")
	p.waitFor("the like stored", logged("PUT", "/v1/reactions/"+video, 200, `e.dataset.issuedToken.length === 11`), stepWait)
	tag := func(n int64) string { return fmt.Sprintf(`'"%d"'`, n) }
	liked := reactionVersion(t, device, video)
	p.waitFor("the like's ETag", logged("PUT", "/v1/reactions/"+video, 200, `e.dataset.etag === `+tag(liked)), stepWait)
	p.waitFor("the counts read at the like's Session-Token", `(() => {
		const es = [...document.querySelectorAll("#log .entry")];
		const put = es.find(e => e.dataset.method === "PUT" && e.dataset.etag === `+tag(liked)+`);
		return put && es.some(e => e.dataset.path.startsWith("/v1/me/counts") && e.dataset.status === "200" && e.dataset.sessionToken === put.dataset.issuedToken);
	})()`, stepWait)
	p.waitFor("one like counted and shown as mine",
		textIs("#count-likes", "1")+" && "+pressed("#like")+" && "+textIs("#viewer-reaction", "like")+` && document.querySelector("#if-match").value === `+tag(liked), stepWait)

	// Dislike, conditional on the ETag of the like.
	p.click("#dislike")
	p.waitFor("the dislike sent with If-Match", logged("PUT", "/v1/reactions/"+video, 200, `e.dataset.ifMatch === `+tag(liked)+` && e.dataset.etag === `+tag(liked+1)), stepWait)
	p.waitFor("the dislike counted",
		textIs("#count-likes", "0")+" && "+textIs("#count-dislikes", "1")+" && "+pressed("#dislike")+" && !("+pressed("#like")+")", stepWait)

	// Another device of the same user changes the reaction: the page's
	// If-Match is stale, the API answers 412, and the page shows the API's
	// message and corrects itself from the server's state.
	if code, hdr, body := device.do("PUT", "/v1/reactions/"+video, `{"reaction":"like"}`); code != 200 || hdr.Get("ETag") != fmt.Sprintf(`"%d"`, liked+2) {
		t.Fatalf("PUT from another device: %d ETag %s %s", code, hdr.Get("ETag"), body)
	}
	p.click("#dislike")
	p.waitFor("a 412 on the stale If-Match", logged("PUT", "/v1/reactions/"+video, 412, `e.dataset.ifMatch === `+tag(liked+1)+` && e.dataset.etag === `+tag(liked+2)), stepWait)
	p.waitFor("the API's error message shown",
		`document.querySelector("#error.shown .msg").textContent.includes("412 FAILED_PRECONDITION: the reaction is at version `+fmt.Sprint(liked+2)+`")`, stepWait)
	p.waitFor("the page corrected to the server's state",
		textIs("#count-likes", "1")+" && "+textIs("#count-dislikes", "0")+" && "+pressed("#like")+` && document.querySelector("#if-match").value === `+tag(liked+2), stepWait)
	p.click("#dislike")
	p.waitFor("the retry with the fresh ETag", logged("PUT", "/v1/reactions/"+video, 200, `e.dataset.ifMatch === `+tag(liked+2)+` && e.dataset.etag === `+tag(liked+3)), stepWait)
	p.waitFor("the dislike counted again", textIs("#count-likes", "0")+" && "+textIs("#count-dislikes", "1"), stepWait)

	// A comment, a reply, and the reply deleted.
	comment := "Hello from the " + name + " page"
	p.setValue("#comment-text", comment)
	p.click("#post-comment")
	p.waitFor("the comment posted with an Idempotency-Key", logged("POST", "/v1/videos/"+video+"/comments", 201, `e.dataset.idempotencyKey.length === 32`), stepWait)
	p.waitFor("the comment listed", textIs("#comments li.comment .text", comment), stepWait)
	p.waitFor("one comment counted, one thread", textIs("#count-comments", "1")+" && "+textIs("#count-threads", "1"), stepWait)

	reply := "A reply on the " + name + " page"
	p.click(`#comments li.comment button[data-action="reply"]`)
	p.setValue("#comments form.replyform textarea", reply)
	p.click(`#comments form.replyform button[type="submit"]`)
	p.waitFor("the reply listed under its comment", textIs("#comments li.comment ul.replies li.reply .text", reply), stepWait)
	p.click(`#comments li.reply button[data-action="delete"]`)
	p.waitFor("the reply deleted", logged("DELETE", "/v1/comments/", 204, "")+` && !document.querySelector("#comments li.reply")`, stepWait)

	spam := "Buy followers now (" + name + ")"
	p.setValue("#comment-text", spam)
	p.click("#post-comment")
	p.waitFor("the second comment listed first", textIs("#comments li.comment .text", spam), stepWait)
	p.waitFor("two comments counted, two threads", textIs("#count-comments", "2")+" && "+textIs("#count-threads", "2"), stepWait)

	// A moderator marks the second comment as spam.
	p.setValue("#uid", "mod-"+uid)
	p.eval("tick moderator", `document.querySelector("#moderator").checked = true`)
	p.click("#signin-btn")
	p.waitFor("signed in as a moderator", `document.body.dataset.signedIn === `+js("mod-"+uid)+` && document.querySelector("#whoami .badge")`, stepWait)
	p.waitFor("the spam button", `document.querySelector('#comments li.comment button[data-action="spam"]')`, stepWait)
	p.click(`#comments li.comment button[data-action="spam"]`)
	p.waitFor("the spam marked", logged("POST", "/v1/moderation/spam", 200, `e.querySelector("pre.res").textContent.includes('"updated": 1')`), stepWait)
	p.waitFor("only the first comment listed",
		`document.querySelectorAll("#comments li.comment").length === 1 && `+textIs("#comments li.comment .text", comment), stepWait)
	p.waitFor("the spam no longer counted (live counts)", textIs("#count-comments", "1")+" && "+textIs("#count-threads", "1"), asyncWait)

	// The moderator flags an account, sees it listed, and unflags it.
	bot := "bot-" + uid
	inFlags := `document.querySelector('#flags li.flag[data-user=` + js(bot) + `]')`
	p.waitFor("the flagged accounts card", `!document.querySelector("#flags-card").hidden`, stepWait)
	p.setValue("#flag-uid", bot)
	p.click(`#flag-form button[type="submit"]`)
	p.waitFor("the account flagged", logged("POST", "/v1/moderation/flagged-users", 200, `e.querySelector("pre.res").textContent.includes('"updated": 1')`), stepWait)
	p.waitFor("the account listed as a moderator's flag", inFlags+` && `+inFlags+`.querySelector(".badge").textContent === "moderator"`, stepWait)
	p.click(`#flags li.flag[data-user=` + js(bot) + `] button[data-action="unflag"]`)
	p.waitFor("the account unflagged and gone from the list", `!`+inFlags, stepWait)

	// Back as the user: history with record, pause, resume and clear.
	p.setValue("#uid", uid)
	p.eval("untick moderator", `document.querySelector("#moderator").checked = false`)
	p.click("#signin-btn")
	p.waitFor("signed in as the user again", `document.body.dataset.signedIn === `+js(uid)+` && !document.querySelector("#whoami .badge")`, stepWait)
	p.waitFor("the user's reaction again", textIs("#viewer-reaction", "dislike")+" && "+pressed("#dislike"), stepWait)

	inHistory := `document.querySelector('#history li[data-video=` + js(video) + `]')`
	p.click("#record-watch")
	p.waitFor("the watch accepted", logged("POST", "/v1/history", 202, `e.querySelector("pre.res").textContent.includes('"recorded": true')`), stepWait)
	p.waitFor("the watch in the history", inHistory, asyncWait)

	p.click("#toggle-pause")
	p.waitFor("history paused", textIs("#history-state", "paused")+" && "+logged("PUT", "/v1/history/settings", 200, ""), stepWait)
	p.click("#record-watch")
	p.waitFor("a watch not recorded while paused", logged("POST", "/v1/history", 202, `e.querySelector("pre.res").textContent.includes('"recorded": false')`), stepWait)
	p.click("#toggle-pause")
	p.waitFor("history resumed", textIs("#history-state", "recording"), stepWait)

	p.click("#clear-history")
	p.waitFor("history cleared", logged("DELETE", "/v1/history", 204, "")+` && !`+inHistory, stepWait)
	p.click("#record-watch")
	p.waitFor("a new watch in the history", inHistory, asyncWait)
	// Two recorded watches of the video by one user: one view per viewing
	// window, through Pub/Sub into the counters (two when the watches fall
	// either side of a window's edge).
	p.waitFor("the views counted (live counts)", "("+textIs("#count-views", "1")+" || "+textIs("#count-views", "2")+")", asyncWait)
	// uniqueViewers is shown whenever the counts carry it: one viewer here.
	p.waitFor("one unique viewer shown when the API sends uniqueViewers",
		`(() => { const e = [...document.querySelectorAll("#log .entry")].find(e => e.dataset.path.includes("counts?ids=")); `+
			`return !e.querySelector("pre.res").textContent.includes("uniqueViewers") || `+
			`(!document.querySelector("#stat-unique").hidden && `+textIs("#count-unique", "1")+`); })()`, asyncWait)
	p.eval("dismiss the 412's error", `document.querySelector("#error").classList.remove("shown")`)

	shot, cancelShot := context.WithTimeout(ctx, stepWait)
	defer cancelShot()
	png, err := chromedp.Run(shot, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	file := filepath.Join(t.ArtifactDir(), "playground-"+name+".png")
	if err := os.WriteFile(file, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", file)
}

// reactionVersion is the caller's reaction version on video, as
// GET /v1/reactions answers it.
func reactionVersion(t *testing.T, c client, video string) int64 {
	t.Helper()
	code, _, body := c.do("GET", "/v1/reactions?ids="+video, "")
	var got struct {
		Reactions map[string]struct {
			Version int64 `json:"version"`
		} `json:"reactions"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Reactions[video].Version < 1 {
		t.Fatalf("GET /v1/reactions: %d %s", code, body)
	}
	return got.Reactions[video].Version
}
