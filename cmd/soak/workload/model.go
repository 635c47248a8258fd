package workload

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/videngage/engagement/shared/counter"
)

// WatchKey is one recorded watch: the same key recorded twice is one watch.
type WatchKey struct {
	User, Video string
	At          int64 // Unix milliseconds
}

type watchInfo struct {
	position float64
	accepted int64 // the model's sequence number at its last acceptance
	view     bool  // it counts as a view (dated within a window of its acceptance)
}

// Comment is an accepted comment and whether it was removed (deleted or
// marked as spam).
type Comment struct {
	ID, Video, Parent, Author string
	Removed                   bool
}

// Model is what the API accepted: the truth that the counters, the listings
// and the histories must end up showing. Every change is recorded when its
// user saw it accepted; users are sequential, so a user's changes are in
// the order the service applied them.
type Model struct {
	mu        sync.Mutex
	seq       int64
	reactions map[string]map[string]string // item → user → like/dislike
	watches   map[WatchKey]*watchInfo
	deleted   map[string]map[string]int64 // user → video → sequence of its last DELETE
	cleared   map[string]int64            // user → sequence of the last DELETE /v1/history
	comments  map[string]*Comment
	keys      map[string]bool   // every counter key touched
	users     map[string]string // user → token
	accepted  int
	journal   map[string][]string // user → its accepted history writes, in order
	window    time.Duration       // the stack's viewing window
}

// NewModel returns an empty model of a stack whose viewing window is
// window (one window holds the whole run: ViewWindowFor).
func NewModel(window time.Duration) *Model {
	return &Model{
		window:    window,
		reactions: map[string]map[string]string{}, watches: map[WatchKey]*watchInfo{},
		deleted: map[string]map[string]int64{}, cleared: map[string]int64{},
		comments: map[string]*Comment{}, keys: map[string]bool{}, users: map[string]string{},
		journal: map[string][]string{},
	}
}

// AddUser remembers a user's token, for reading back what it sees.
func (m *Model) AddUser(user, token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users[user] = token
}

// Users returns every user and its token.
func (m *Model) Users() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.users)
}

// Accepted is the number of writes accepted.
func (m *Model) Accepted() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.accepted
}

// Watches is the number of distinct watches recorded.
func (m *Model) Watches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.watches)
}

// SetReaction records an accepted PUT /v1/reactions.
func (m *Model) SetReaction(user, item, kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.keys[item] = true
	if m.reactions[item] == nil {
		m.reactions[item] = map[string]string{}
	}
	if kind == "none" {
		delete(m.reactions[item], user)
	} else {
		m.reactions[item][user] = kind
	}
}

// Reaction is a user's current reaction on an item: like, dislike or none.
func (m *Model) Reaction(user, item string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.reactions[item][user]; r != "" {
		return r
	}
	return "none"
}

// AddWatch records an accepted POST /v1/history.
func (m *Model) AddWatch(k WatchKey, position float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.seq++
	m.keys[k.Video] = true
	view := countsAsView(k, time.Now(), m.window)
	if old, ok := m.watches[k]; ok {
		view = view || old.view
	}
	m.watches[k] = &watchInfo{position: position, accepted: m.seq, view: view}
	m.note(k.User, "watch %s at %s", k.Video, time.UnixMilli(k.At).UTC().Format(time.RFC3339Nano))
}

func (m *Model) note(user, format string, args ...any) {
	m.journal[user] = append(m.journal[user], fmt.Sprintf("%s #%d ", time.Now().UTC().Format("15:04:05.000"), m.seq)+fmt.Sprintf(format, args...))
}

// Journal is a user's accepted history writes, in order, with the time each
// was seen accepted: what to read when a history is not as expected.
func (m *Model) Journal(user string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.journal[user])
}

// DeleteVideo records an accepted DELETE /v1/history/{video}: the watches
// of it accepted so far leave the history (not the views).
func (m *Model) DeleteVideo(user, video string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.seq++
	if m.deleted[user] == nil {
		m.deleted[user] = map[string]int64{}
	}
	m.deleted[user][video] = m.seq
	m.note(user, "delete %s", video)
}

// ClearHistory records an accepted DELETE /v1/history.
func (m *Model) ClearHistory(user string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.seq++
	m.cleared[user] = m.seq
	m.note(user, "clear")
}

// AddComment records an accepted comment (once, however often it was
// replayed).
func (m *Model) AddComment(c Comment) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	m.keys[c.Video] = true
	if c.Parent == "" {
		m.keys[c.ID] = true
	}
	if _, ok := m.comments[c.ID]; !ok {
		m.comments[c.ID] = &c
	}
}

// RemoveComments records an accepted delete or spam verdict.
func (m *Model) RemoveComments(ids ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.accepted++
	for _, id := range ids {
		if c, ok := m.comments[id]; ok {
			c.Removed = true
		}
	}
}

// CommentVideo is the video of an accepted comment.
func (m *Model) CommentVideo(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.comments[id]; ok {
		return c.Video
	}
	return ""
}

// visible reports whether a comment counts: it and its parent stand.
func (m *Model) visible(c *Comment) bool {
	return !c.Removed && (c.Parent == "" || !m.comments[c.Parent].Removed)
}

// Keys are every counter key the load touched, sorted.
func (m *Model) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.keys))
}

// Counts is what every counter must read: likes and dislikes from the
// current reactions, views from the users who recorded a watch of the video
// that counts as a view (one view each: the run lies in one viewing
// window), comments, threads and replies from the visible comments.
func (m *Model) Counts() map[string]counter.Values {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]counter.Values{}
	for k := range m.keys {
		out[k] = counter.Values{}
	}
	for item, byUser := range m.reactions {
		v := out[item]
		for _, kind := range byUser {
			if kind == "like" {
				v.Likes++
			} else {
				v.Dislikes++
			}
		}
		out[item] = v
	}
	for video, users := range m.viewers() {
		v := out[video]
		v.Views = int64(len(users))
		out[video] = v
	}
	for _, c := range m.comments {
		if !m.visible(c) {
			continue
		}
		v := out[c.Video]
		v.Comments++
		out[c.Video] = v
		if c.Parent != "" {
			p := out[c.Parent]
			p.Replies++
			out[c.Parent] = p
		} else {
			v.Threads++
			out[c.Video] = v
		}
	}
	return out
}

// UniqueViewers is, per key, how many distinct users it was counted a view
// of.
func (m *Model) UniqueViewers() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	viewers := m.viewers()
	out := map[string]int64{}
	for k := range m.keys {
		out[k] = int64(len(viewers[k]))
	}
	return out
}

// viewers are, per video, the users whose watches of it count a view.
func (m *Model) viewers() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for w, info := range m.watches {
		if !info.view {
			continue
		}
		if out[w.Video] == nil {
			out[w.Video] = map[string]bool{}
		}
		out[w.Video][w.User] = true
	}
	return out
}

// HistoryEntry is one entry of a user's history.
type HistoryEntry struct {
	Video    string
	At       int64 // Unix milliseconds
	Position float64
}

// History is each user's expected history, newest first: each video once,
// at its latest watch accepted after the video's last deletion.
func (m *Model) History() map[string][]HistoryEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	latest := map[string]map[string]HistoryEntry{}
	for w, info := range m.watches {
		if info.accepted < max(m.cleared[w.User], m.deleted[w.User][w.Video]) {
			continue
		}
		if latest[w.User] == nil {
			latest[w.User] = map[string]HistoryEntry{}
		}
		if e, ok := latest[w.User][w.Video]; !ok || w.At > e.At {
			latest[w.User][w.Video] = HistoryEntry{Video: w.Video, At: w.At, Position: info.position}
		}
	}
	out := map[string][]HistoryEntry{}
	for u, byVideo := range latest {
		es := slices.Collect(maps.Values(byVideo))
		sort.Slice(es, func(i, j int) bool {
			if es[i].At != es[j].At {
				return es[i].At > es[j].At
			}
			return es[i].Video < es[j].Video
		})
		out[u] = es
	}
	return out
}

// Videos are the videos with comments, sorted.
func (m *Model) Videos() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := map[string]bool{}
	for _, c := range m.comments {
		set[c.Video] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// VisibleParents are the visible top-level comments, sorted.
func (m *Model) VisibleParents() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.comments {
		if c.Parent == "" && m.visible(c) {
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out
}

// Listing is what a listing must show, sorted: the visible top-level
// comments of a video (parent "") or the visible replies of a comment.
func (m *Model) Listing(video, parent string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.comments {
		if c.Parent == parent && (parent != "" || c.Video == video) && m.visible(c) {
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out
}
