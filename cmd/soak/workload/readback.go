package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/videngage/engagement/shared/apiclient"
	"github.com/videngage/engagement/shared/counter"
)

// History reads all of a user's history through the API, newest first.
func (c *Client) History(tok string) ([]HistoryEntry, error) {
	var out []HistoryEntry
	token := ""
	for range 1000 {
		params := &apiclient.ListHistoryParams{PageSize: ptr(int32(100))}
		if token != "" {
			params.PageToken = ptr(token)
		}
		resp, err := c.typed(tok).ListHistoryWithResponse(context.Background(), params)
		if err != nil {
			return nil, fmt.Errorf("GET /v1/history: %w", err)
		}
		page := resp.JSON200
		if page == nil {
			return nil, fmt.Errorf("GET /v1/history: %d %s", resp.StatusCode(), resp.Body)
		}
		for _, e := range page.Entries {
			out = append(out, HistoryEntry{Video: e.VideoId, At: e.WatchedAt.UnixMilli(), Position: deref(e.PositionSeconds)})
		}
		if token = deref(page.NextPageToken); token == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("a history of more than 1000 pages")
}

// HistoryDiff compares a history read back with the model's.
type HistoryDiff struct {
	Missing    []HistoryEntry // expected and absent: rows lost
	Wrong      []string       // present at another time or position
	Unexpected []string       // present and not expected (deleted, or never recorded)
	Order      bool           // the same entries, in another order
}

// Empty reports whether the history is as expected.
func (d HistoryDiff) Empty() bool {
	return len(d.Missing) == 0 && len(d.Wrong) == 0 && len(d.Unexpected) == 0 && !d.Order
}

func (d HistoryDiff) String() string {
	var parts []string
	for _, e := range d.Missing {
		parts = append(parts, fmt.Sprintf("missing %s at %s", e.Video, time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano)))
	}
	parts = append(parts, d.Wrong...)
	for _, v := range d.Unexpected {
		parts = append(parts, "unexpected "+v)
	}
	if d.Order {
		parts = append(parts, "entries out of order")
	}
	return strings.Join(parts, "; ")
}

// DiffHistory compares got with want.
func DiffHistory(got, want []HistoryEntry) HistoryDiff {
	var d HistoryDiff
	if slices.Equal(got, want) {
		return d
	}
	g := map[string]HistoryEntry{}
	for _, e := range got {
		g[e.Video] = e
	}
	for _, e := range want {
		ge, ok := g[e.Video]
		switch {
		case !ok:
			d.Missing = append(d.Missing, e)
		case ge != e:
			d.Wrong = append(d.Wrong, fmt.Sprintf("%s at %s (%v s), want %s (%v s)", e.Video,
				time.UnixMilli(ge.At).UTC().Format(time.RFC3339Nano), ge.Position, time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano), e.Position))
		}
		delete(g, e.Video)
	}
	for _, v := range slices.Sorted(maps.Keys(g)) {
		d.Unexpected = append(d.Unexpected, v)
	}
	d.Order = d.Empty()
	return d
}

// CheckHistories reads every user's history back and compares it with the
// model's: the differences by user.
func CheckHistories(c *Client, m *Model) map[string]HistoryDiff {
	want := m.History()
	out := map[string]HistoryDiff{}
	for u, tok := range m.Users() {
		got, err := c.History(tok)
		if err != nil {
			out[u] = HistoryDiff{Wrong: []string{err.Error()}}
			continue
		}
		if d := DiffHistory(got, want[u]); !d.Empty() {
			out[u] = d
		}
	}
	return out
}

// Counts reads the counts of ids anonymously, 50 at a time.
func (c *Client) Counts(ids []string) (map[string]counter.Values, map[string]int64, error) {
	out, unique := map[string]counter.Values{}, map[string]int64{}
	for chunk := range slices.Chunk(ids, 50) {
		resp, err := c.typed("").GetCountsWithResponse(context.Background(), &apiclient.GetCountsParams{Ids: slices.Sorted(slices.Values(chunk))})
		if err != nil {
			return nil, nil, fmt.Errorf("GET /v1/counts: %w", err)
		}
		if resp.JSON200 == nil {
			return nil, nil, fmt.Errorf("GET /v1/counts: %d %s", resp.StatusCode(), resp.Body)
		}
		for k, v := range resp.JSON200.Counts {
			unique[k] = v.UniqueViewers
			out[k] = counter.Values{Likes: v.Likes, Dislikes: v.Dislikes, Comments: v.Comments, Threads: v.Threads, Replies: v.Replies, Views: v.Views}
		}
	}
	return out, unique, nil
}

// CheckCounts compares the anonymous counts with the model: the keys that
// differ, described. Unique viewers are few here, so their estimate must be
// exact.
func CheckCounts(c *Client, m *Model) ([]string, error) {
	want, wantUnique := m.Counts(), m.UniqueViewers()
	got, unique, err := c.Counts(slices.Sorted(maps.Keys(want)))
	if err != nil {
		return nil, err
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			diffs = append(diffs, fmt.Sprintf("%s: GET /v1/counts says %+v, want %+v", k, got[k], want[k]))
		}
		if unique[k] != wantUnique[k] {
			diffs = append(diffs, fmt.Sprintf("%s: GET /v1/counts says %d unique viewers, want %d", k, unique[k], wantUnique[k]))
		}
	}
	return diffs, nil
}

// MeCounts is the answer of GET /v1/me/counts.
type MeCounts struct {
	Counts map[string]counter.Values `json:"counts"`
	Viewer struct {
		Reactions map[string]struct{ Reaction string } `json:"reactions"`
	} `json:"viewer"`
}

// Reaction is the viewer's reaction on id ("none" when the answer has
// none).
func (m MeCounts) Reaction(id string) string {
	if r := m.Viewer.Reactions[id].Reaction; r != "" {
		return r
	}
	return "none"
}

// CheckReactions reads every reactor's reactions back: the last accepted
// PUT of each item must stand, in GET /v1/reactions and in the viewer part
// of GET /v1/me/counts, whose counts must be the settled ones (every share
// of the reactor's is counted by now, so none may be added again).
func CheckReactions(c *Client, m *Model) []string {
	var diffs []string
	keys := m.Keys()
	users := m.Users()
	counts := m.Counts()
	for _, u := range slices.Sorted(maps.Keys(users)) {
		if !strings.HasPrefix(u, "reactor-") {
			continue
		}
		for chunk := range slices.Chunk(keys, 50) {
			resp, err := c.typed(users[u]).GetReactionsWithResponse(context.Background(), &apiclient.GetReactionsParams{Ids: chunk})
			if err != nil {
				diffs = append(diffs, fmt.Sprintf("%s: GET /v1/reactions: %v", u, err))
				continue
			}
			if resp.JSON200 == nil {
				diffs = append(diffs, fmt.Sprintf("%s: GET /v1/reactions: %d %s", u, resp.StatusCode(), resp.Body))
				continue
			}
			for _, k := range chunk {
				if got, want := string(resp.JSON200.Reactions[k].Reaction), m.Reaction(u, k); got != want {
					diffs = append(diffs, fmt.Sprintf("%s on %s: GET /v1/reactions says %q, the last accepted PUT set %q", u, k, got, want))
				}
			}
			code, _, b := c.Do(nil, "", "GET", "/v1/me/counts?ids="+strings.Join(chunk, ","), users[u], "")
			var own MeCounts
			if code != 200 || json.Unmarshal(b, &own) != nil {
				diffs = append(diffs, fmt.Sprintf("%s: GET /v1/me/counts: %d %s", u, code, b))
				continue
			}
			for _, k := range chunk {
				got := own.Counts[k]
				got.UniqueViewers = 0
				if got != counts[k] {
					diffs = append(diffs, fmt.Sprintf("%s on %s: GET /v1/me/counts says %+v, want %+v", u, k, got, counts[k]))
				}
				if got, want := own.Reaction(k), m.Reaction(u, k); got != want {
					diffs = append(diffs, fmt.Sprintf("%s on %s: GET /v1/me/counts says %q, the last accepted PUT set %q", u, k, got, want))
				}
			}
		}
	}
	return diffs
}

// Comments reads all pages of a comment listing: comment id → replyCount.
func (c *Client) Comments(path string) (map[string]int64, error) {
	out := map[string]int64{}
	token := ""
	for range 1000 {
		p := path + "?pageSize=100"
		if token != "" {
			p += "&pageToken=" + url.QueryEscape(token)
		}
		code, _, b := c.Do(nil, "", "GET", p, "", "")
		var page struct {
			Comments []struct {
				ID         string `json:"id"`
				ReplyCount int64  `json:"replyCount"`
			} `json:"comments"`
			NextPageToken string `json:"nextPageToken"`
		}
		if code != 200 || json.Unmarshal(b, &page) != nil {
			return nil, fmt.Errorf("GET %s: %d %s", p, code, b)
		}
		for _, c := range page.Comments {
			out[c.ID] = c.ReplyCount
		}
		if token = page.NextPageToken; token == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("GET %s: more than 1000 pages", path)
}

// CheckComments reads every listing back: each visible comment and reply,
// with its reply count, and nothing else. It returns the differences, the
// number of comments listed, and how many reads failed before one answered
// (each listing is read up to thirty times). Four listings are read at once.
func CheckComments(c *Client, m *Model) (diffs []string, listed, failedReads int) {
	want := m.Counts()
	var mu sync.Mutex
	read := func(path string) (map[string]int64, error) {
		var got map[string]int64
		var err error
		for range 30 {
			if got, err = c.Comments(path); err == nil {
				return got, nil
			}
			mu.Lock()
			failedReads++
			mu.Unlock()
			time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		}
		return nil, err
	}
	check := func(path, video, parent string) {
		got, err := read(path)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			diffs = append(diffs, err.Error())
			return
		}
		listed += len(got)
		if ids, w := slices.Sorted(maps.Keys(got)), m.Listing(video, parent); !slices.Equal(ids, w) {
			diffs = append(diffs, fmt.Sprintf("%s: listed %v, want %v", path, ids, w))
		}
		if parent != "" {
			return
		}
		for id, n := range got {
			if n != want[id].Replies {
				diffs = append(diffs, fmt.Sprintf("comment %s lists replyCount %d, want %d", id, n, want[id].Replies))
			}
		}
	}
	work := make(chan func())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for f := range work {
				f()
			}
		})
	}
	for _, v := range m.Videos() {
		work <- func() { check("/v1/videos/"+v+"/comments", v, "") }
	}
	for _, p := range m.VisibleParents() {
		work <- func() { check("/v1/comments/"+p+"/replies", "", p) }
	}
	close(work)
	wg.Wait()
	slices.Sort(diffs)
	return diffs, listed, failedReads
}
