package historystore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	btpb "cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/history"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// newStore is a History store on fresh tables of the emulator.
func newStore(t testing.TB) (*Store, *bigtable.Client) {
	t.Helper()
	c := emulatortest.Bigtable(t, emulatortest.New(t))
	return New(c), c
}

// base is a recent millisecond: the tables' GC max age (36 months by
// default) would remove cells much older than now.
func base() time.Time { return time.Now().UTC().Truncate(time.Millisecond).Add(-30 * 24 * time.Hour) }

func apply(t testing.TB, h *Store, ws ...history.Watch) {
	t.Helper()
	for _, w := range ws {
		if err := h.Apply(context.Background(), w); err != nil {
			t.Fatalf("Apply(%+v): %v", w, err)
		}
	}
}

func entry(w history.Watch) history.Entry {
	return history.Entry{VideoID: w.VideoID, WatchedAt: w.WatchedAt, PositionSeconds: w.PositionSeconds}
}

// listAll walks every page of the user's history, checking that each page
// holds at most size entries and that only the last one has no cursor.
func listAll(t testing.TB, h *Store, userID string, horizon time.Time, size int) []history.Entry {
	t.Helper()
	var (
		all   []history.Entry
		after *history.Cursor
	)
	for pages := 0; ; pages++ {
		if pages > 100_000 {
			t.Fatalf("List(%q) never reached its last page", userID)
		}
		p, err := h.List(context.Background(), userID, after, horizon, size)
		if err != nil {
			t.Fatalf("List(%q, %+v, %v, %d): %v", userID, after, horizon, size, err)
		}
		if len(p.Entries) > size {
			t.Fatalf("List(%q, size %d) returned %d entries", userID, size, len(p.Entries))
		}
		all = append(all, p.Entries...)
		if p.Next == nil {
			return all
		}
		if after != nil && !p.Next.At.Before(after.At) && !(p.Next.At.Equal(after.At) && p.Next.VideoID > after.VideoID) {
			t.Fatalf("List(%q): cursor %+v does not move past %+v", userID, p.Next, after)
		}
		after = p.Next
	}
}

// rawRows are the row keys of the user in a table with, for each, the
// timestamps of its cells (every version). Deletion cut-offs and the
// views' claims are not watches and are left out; a row holding only those
// is no row.
func rawRows(t testing.TB, tbl *bigtable.Table, userID string) map[string][]time.Time {
	t.Helper()
	rows := map[string][]time.Time{}
	err := tbl.ReadRows(context.Background(), bigtable.NewRange(history.UserPrefix(userID), history.UserEnd(userID)), func(r bigtable.Row) bool {
		var ts []time.Time
		for _, items := range r {
			for _, it := range items {
				pending := strings.HasPrefix(it.Column, PendingFamily+":") // deletion marks, as l:d
				if !pending && (!strings.HasPrefix(it.Column, LatestFamily+":") || it.Column == LatestFamily+":"+colLatestTimes) {
					ts = append(ts, it.Timestamp.Time().UTC())
				}
			}
		}
		if len(ts) == 0 {
			return true
		}
		slices.SortFunc(ts, time.Time.Compare)
		rows[r.Key()] = slices.Compact(ts)
		return true
	})
	if err != nil {
		t.Fatalf("read raw rows of %q: %v", userID, err)
	}
	return rows
}

// checkOneRowPerVideo fails unless the tables hold exactly one history row
// and one latest-watch version per entry of want, at the entry's time.
func checkOneRowPerVideo(t testing.TB, h *Store, userID string, want []history.Entry) {
	t.Helper()
	wantEntries := map[string][]time.Time{}
	wantLatest := map[string][]time.Time{}
	for _, e := range want {
		wantEntries[history.EntryKey(userID, e.WatchedAt, e.VideoID)] = []time.Time{e.WatchedAt}
		wantLatest[history.LatestKey(userID, e.VideoID)] = []time.Time{e.WatchedAt}
	}
	if got := rawRows(t, h.entries, userID); !equalRows(got, wantEntries) {
		t.Errorf("user %q: %s rows = %v, want %v", userID, EntriesTable, got, wantEntries)
	}
	if got := rawRows(t, h.latest, userID); !equalRows(got, wantLatest) {
		t.Errorf("user %q: %s rows = %v, want %v", userID, LatestTable, got, wantLatest)
	}
}

func equalRows(a, b map[string][]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, ta := range a {
		tb, ok := b[k]
		if !ok || !slices.EqualFunc(ta, tb, time.Time.Equal) {
			return false
		}
	}
	return true
}

// bulkLoad writes the rows of watches of distinct videos of one user
// straight to both tables with ApplyBulk, through the same key functions
// and cell layout as Apply: the state Apply leaves, written in a fraction
// of the time (for the benchmark and the large deletes).
func bulkLoad(t testing.TB, h *Store, userID string, watches []history.Watch) {
	t.Helper()
	ctx := context.Background()
	const chunk = 5000
	for len(watches) > 0 {
		n := min(chunk, len(watches))
		var (
			entryKeys, latestKeys []string
			entryMuts, latestMuts []*bigtable.Mutation
		)
		for _, w := range watches[:n] {
			if w.UserID != userID {
				t.Fatalf("bulkLoad: watch of %q for user %q", w.UserID, userID)
			}
			ts := cellTime(w.WatchedAt)
			e := bigtable.NewMutation()
			e.Set(entriesFamily, colVideo, ts, []byte(w.VideoID))
			e.Set(entriesFamily, colPosition, ts, binary.BigEndian.AppendUint64(nil, math.Float64bits(w.PositionSeconds)))
			entryKeys, entryMuts = append(entryKeys, history.EntryKey(userID, w.WatchedAt, w.VideoID)), append(entryMuts, e)
			l := bigtable.NewMutation()
			l.Set(LatestFamily, colLatestTimes, ts, nil)
			latestKeys, latestMuts = append(latestKeys, history.LatestKey(userID, w.VideoID)), append(latestMuts, l)
		}
		for _, b := range []struct {
			tbl  *bigtable.Table
			keys []string
			muts []*bigtable.Mutation
		}{{h.entries, entryKeys, entryMuts}, {h.latest, latestKeys, latestMuts}} {
			errs, err := b.tbl.ApplyBulk(ctx, b.keys, b.muts)
			if err == nil {
				for _, e := range errs {
					if e != nil {
						err = e
						break
					}
				}
			}
			if err != nil {
				t.Fatalf("bulkLoad: %v", err)
			}
		}
		watches = watches[n:]
	}
}

// distinctWatches are n watches of distinct videos, one millisecond apart,
// the newest at newest.
func distinctWatches(userID string, n int, newest time.Time) []history.Watch {
	ws := make([]history.Watch, n)
	for i := range ws {
		ws[i] = history.NewWatch(userID, fmt.Sprintf("v%06d", i), newest.Add(-time.Duration(i)*time.Millisecond), float64(i%5000))
	}
	return ws
}

// readLog records the ReadRows requests a client sends and the rows it
// receives: what a read costs the server, whatever the emulator does.
type readLog struct {
	mu       sync.Mutex
	requests []*btpb.ReadRowsRequest
	rows     int
}

func (l *readLog) reset() (requests []*btpb.ReadRowsRequest, rows int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	requests, rows = l.requests, l.rows
	l.requests, l.rows = nil, 0
	return requests, rows
}

type loggedStream struct {
	grpc.ClientStream
	log *readLog
}

func (s loggedStream) SendMsg(m any) error {
	if req, ok := m.(*btpb.ReadRowsRequest); ok {
		s.log.mu.Lock()
		s.log.requests = append(s.log.requests, proto.Clone(req).(*btpb.ReadRowsRequest))
		s.log.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s loggedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if resp, ok := m.(*btpb.ReadRowsResponse); ok && err == nil {
		s.log.mu.Lock()
		for _, c := range resp.Chunks {
			if c.GetCommitRow() {
				s.log.rows++
			}
		}
		s.log.mu.Unlock()
	}
	return err
}

// newLoggedStore is newStore with a client whose ReadRows calls are logged.
func newLoggedStore(t testing.TB) (*Store, *readLog) {
	t.Helper()
	cfg := emulatortest.New(t)
	log := &readLog{}
	conn, err := grpc.NewClient("passthrough:///"+cfg.Bigtable.EmulatorHost,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			s, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return loggedStream{ClientStream: s, log: log}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := bigtable.NewClientWithConfig(context.Background(), cfg.Project, cfg.Bigtable.Instance,
		bigtable.ClientConfig{MetricsProvider: bigtable.NoopMetricsProvider{}}, option.WithGRPCConn(conn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		conn.Close()
	})
	return New(c), log
}
