package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	"cloud.google.com/go/firestore"
	"cloud.google.com/go/spanner"
	"google.golang.org/api/iterator"

	"github.com/videngage/engagement/cmd/internal/erasurereplay"
	"github.com/videngage/engagement/cmd/soak/workload"
	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/account/accountstore"
	"github.com/videngage/engagement/shared/bus"
	"github.com/videngage/engagement/shared/comment/commentstore"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/history/historystore"
	"github.com/videngage/engagement/shared/ratelimit"
	"github.com/videngage/engagement/shared/reaction/reactionstore"
	"github.com/videngage/engagement/shared/topology"
)

// storesSnapshot is everything the three databases of a drill's stack hold,
// read at one moment: what a backup holds. The emulators have no backups
// and no point-in-time recovery, so a restore is emulated by writing it
// back (restore): every row, cell and document present now is removed and
// the snapshot's are written again, as a restore replaces the database by
// its earlier state. Pub/Sub and the erasure log's bucket are not part of
// it: no restore rolls them back.
type storesSnapshot struct {
	spanner  []spannerTable
	bigtable map[string][]bigtable.Row
	docs     map[string]map[string]map[string]any // collection, document id, data
}

type spannerTable struct {
	name, parent string
	columns      []string // the writable ones: not generated
	rows         [][]any  // spanner.GenericColumnValue
}

// snapshotStores reads every Spanner table (INFORMATION_SCHEMA), every
// Bigtable table of topology.json with every version of every cell, and
// every document of every Firestore collection.
func snapshotStores(t *testing.T, st *drillStack) *storesSnapshot {
	t.Helper()
	ctx := context.Background()
	s := &storesSnapshot{bigtable: map[string][]bigtable.Row{}, docs: map[string]map[string]map[string]any{}}

	err := st.db.InSnapshot(ctx, func(ctx context.Context, ro *spanner.ReadOnlyTransaction) error {
		return s.readSpanner(ctx, ro)
	})
	if err != nil {
		t.Fatalf("snapshot: Spanner: %v", err)
	}

	for _, table := range topology.MustLoad().Bigtable.Tables {
		var rows []bigtable.Row
		err := st.clients.Bigtable.Open(table.Name).ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			rows = append(rows, r)
			return true
		})
		if err != nil {
			t.Fatalf("snapshot: Bigtable %s: %v", table.Name, err)
		}
		s.bigtable[table.Name] = rows
	}

	for _, coll := range firestoreCollections(t, st) {
		docs := map[string]map[string]any{}
		it := st.clients.Firestore.Collection(coll).Documents(ctx)
		for {
			d, err := it.Next()
			if err == iterator.Done {
				break
			}
			if err != nil {
				t.Fatalf("snapshot: Firestore %s: %v", coll, err)
			}
			docs[d.Ref.ID] = d.Data()
		}
		s.docs[coll] = docs
	}
	return s
}

// readSpanner reads every table's writable columns, every row.
func (s *storesSnapshot) readSpanner(ctx context.Context, ro *spanner.ReadOnlyTransaction) error {
	err := ro.Query(ctx, spanner.Statement{SQL: `SELECT TABLE_NAME, COALESCE(PARENT_TABLE_NAME, '') FROM INFORMATION_SCHEMA.TABLES
WHERE TABLE_SCHEMA = '' ORDER BY TABLE_NAME`}).Do(func(r *spanner.Row) error {
		var tb spannerTable
		if err := r.Columns(&tb.name, &tb.parent); err != nil {
			return err
		}
		s.spanner = append(s.spanner, tb)
		return nil
	})
	if err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	for i := range s.spanner {
		tb := &s.spanner[i]
		err := ro.Query(ctx, spanner.Statement{SQL: `SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS
WHERE TABLE_SCHEMA = '' AND TABLE_NAME = @t AND IS_GENERATED = 'NEVER' ORDER BY ORDINAL_POSITION`,
			Params: map[string]any{"t": tb.name}}).Do(func(r *spanner.Row) error {
			var c string
			if err := r.Columns(&c); err != nil {
				return err
			}
			tb.columns = append(tb.columns, c)
			return nil
		})
		if err != nil {
			return fmt.Errorf("columns of %s: %w", tb.name, err)
		}
		err = ro.Read(ctx, tb.name, spanner.AllKeys(), tb.columns).Do(func(r *spanner.Row) error {
			vals := make([]any, r.Size())
			for j := range vals {
				var v spanner.GenericColumnValue
				if err := r.Column(j, &v); err != nil {
					return err
				}
				vals[j] = v
			}
			tb.rows = append(tb.rows, vals)
			return nil
		})
		if err != nil {
			return fmt.Errorf("rows of %s: %w", tb.name, err)
		}
	}
	return nil
}

// firestoreCollections are the root collections that hold documents now.
func firestoreCollections(t *testing.T, st *drillStack) []string {
	t.Helper()
	var out []string
	it := st.clients.Firestore.Collections(context.Background())
	for {
		c, err := it.Next()
		if err == iterator.Done {
			return out
		}
		if err != nil {
			t.Fatalf("Firestore collections: %v", err)
		}
		out = append(out, c.ID)
	}
}

// summary says how much the snapshot holds, per store.
func (s *storesSnapshot) summary() string {
	var sp, bt, fs int
	for _, tb := range s.spanner {
		sp += len(tb.rows)
	}
	for _, rows := range s.bigtable {
		bt += len(rows)
	}
	for _, docs := range s.docs {
		fs += len(docs)
	}
	return fmt.Sprintf("Spanner %d rows in %d tables, Bigtable %d rows, Firestore %d documents", sp, len(s.spanner), bt, fs)
}

// restore writes the snapshot back: each Spanner table emptied (children
// before their parents) and its rows inserted again (parents first); each
// Bigtable row present now deleted and the snapshot's cells written with
// their own timestamps; each Firestore document present now deleted and
// the snapshot's set again.
func (s *storesSnapshot) restore(t *testing.T, st *drillStack) {
	t.Helper()
	ctx := context.Background()

	depth := map[string]int{}
	parent := map[string]string{}
	for _, tb := range s.spanner {
		parent[tb.name] = tb.parent
	}
	for _, tb := range s.spanner {
		for p := tb.parent; p != ""; p = parent[p] {
			depth[tb.name]++
		}
	}
	tables := slices.Clone(s.spanner)
	slices.SortStableFunc(tables, func(a, b spannerTable) int { return depth[b.name] - depth[a.name] })
	var dels []*spanner.Mutation
	for _, tb := range tables {
		dels = append(dels, spanner.Delete(tb.name, spanner.AllKeys()))
	}
	if err := st.apply(ctx, dels); err != nil {
		t.Fatalf("restore: empty Spanner: %v", err)
	}
	slices.Reverse(tables)
	for _, tb := range tables {
		for rows := tb.rows; len(rows) > 0; {
			n := min(len(rows), 500)
			var ms []*spanner.Mutation
			for _, vals := range rows[:n] {
				ms = append(ms, spanner.Insert(tb.name, tb.columns, vals))
			}
			if err := st.apply(ctx, ms); err != nil {
				t.Fatalf("restore: Spanner %s: %v", tb.name, err)
			}
			rows = rows[n:]
		}
	}

	for name, rows := range s.bigtable {
		tbl := st.clients.Bigtable.Open(name)
		var keys []string
		err := tbl.ReadRows(ctx, bigtable.InfiniteRange(""), func(r bigtable.Row) bool {
			keys = append(keys, r.Key())
			return true
		}, bigtable.RowFilter(bigtable.StripValueFilter()))
		if err != nil {
			t.Fatalf("restore: Bigtable %s: %v", name, err)
		}
		var ms []*bigtable.Mutation
		for range keys {
			m := bigtable.NewMutation()
			m.DeleteRow()
			ms = append(ms, m)
		}
		applyBulk(t, tbl, keys, ms)
		keys, ms = keys[:0], ms[:0]
		for _, r := range rows {
			m := bigtable.NewMutation()
			for fam, items := range r {
				for _, it := range items {
					m.Set(fam, strings.TrimPrefix(it.Column, fam+":"), it.Timestamp, it.Value)
				}
			}
			keys = append(keys, r.Key())
			ms = append(ms, m)
		}
		applyBulk(t, tbl, keys, ms)
	}

	fs := st.clients.Firestore
	bw := fs.BulkWriter(ctx)
	var jobs []*firestore.BulkWriterJob
	for _, coll := range firestoreCollections(t, st) {
		refs, err := fs.Collection(coll).DocumentRefs(ctx).GetAll()
		if err != nil {
			t.Fatalf("restore: Firestore %s: %v", coll, err)
		}
		for _, ref := range refs {
			j, err := bw.Delete(ref)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, j)
		}
	}
	bw.Flush()
	for coll, docs := range s.docs {
		for id, data := range docs {
			j, err := bw.Set(fs.Collection(coll).Doc(id), data)
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, j)
		}
	}
	bw.End()
	for _, j := range jobs {
		if _, err := j.Results(); err != nil {
			t.Fatalf("restore: Firestore: %v", err)
		}
	}
}

// apply commits ms in one read-write transaction, in the stack's turn.
func (st *drillStack) apply(ctx context.Context, ms []*spanner.Mutation) error {
	_, err := st.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(ms)
	})
	return err
}

func applyBulk(t *testing.T, tbl *bigtable.Table, keys []string, ms []*bigtable.Mutation) {
	t.Helper()
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		errs, err := tbl.ApplyBulk(context.Background(), keys[:n], ms[:n])
		if err != nil {
			t.Fatalf("restore: Bigtable: %v", err)
		}
		for _, err := range errs {
			if err != nil {
				t.Fatalf("restore: Bigtable row: %v", err)
			}
		}
		keys, ms = keys[n:], ms[n:]
	}
}

var restoreSkipReplay = flag.Bool("restore-skip-replay", false, "restore drill without the replay of the erasure log: the drill must fail")

// Drill 10. A restore brings an erased user back; the replay of the
// erasure log (cmd/replayerasures) erases them again. A backup is a
// snapshot of the three databases (storesSnapshot), and a restore writes
// it back. Three accounts with data:
//
//   - one erased before the first backup: neither back after the restores
//     nor erased again by the first replay;
//   - one erased after the first backup: the restore brings their
//     reactions, comments, history, settings and counts back (checked); the
//     replay from the restore point erases them again;
//   - one whose erasure the second backup catches halfway (reactions
//     erased, comments not: the backup is taken while EraseAccount's
//     deliveries are refused and one step at a time is run here): the
//     restore brings back the open erasure and the comments; the replay
//     from a day before the restore point, as the runbook says, asks again
//     for every erasure since, the finished ones included.
//
// After each replay every counter equals what the remaining data gives,
// recounted from Spanner's rows, with nothing pending, and a
// reconciliation corrects nothing: nothing was decremented twice.
func TestDrillErasureReplayedAfterRestore(t *testing.T) {
	st := startStack(t, stackOptions{env: map[string]string{
		"ERASURE_SETTLE": "2s", "ERASURE_BUDGET": "2s", "ERASURE_STALLED_AFTER": "3s",
	}})
	ctx := context.Background()
	records := accountstore.New(st.db)
	size := erasureSize{reactions: 60, comments: 20, replies: 10, entries: 300}
	var keys []string
	after := map[string]counter.Values{}

	const early = "restore-erased-early"
	_, afterEarly, keysEarly := seedAccount(t, st, early, "restore-other-early", "rve", erasureSize{reactions: 5, comments: 2, replies: 1, entries: 10})
	erase(t, st, early)
	waitTotals(t, st, keysEarly, afterEarly, 3*time.Minute)
	keys = append(keys, keysEarly...)
	maps.Copy(after, afterEarly)

	const user = "restore-erasee"
	beforeUser, afterUser, keysUser := seedAccount(t, st, user, "restore-other", "rv", size)
	waitTotals(t, st, keysUser, beforeUser, 3*time.Minute)
	keys = append(keys, keysUser...)
	maps.Copy(after, afterUser)
	before := maps.Clone(after)
	maps.Copy(before, beforeUser)

	// The first backup: the user's data in it.
	restorePoint := time.Now()
	backup := snapshotStores(t, st)
	t.Logf("first backup: %s", backup.summary())
	e := erase(t, st, user)
	waitTotals(t, st, keys, after, 3*time.Minute)
	checkExportEmpty(t, st, user)
	t.Logf("erased: %d reactions, %d comments, %d history rows", e.Reactions, e.Comments, e.HistoryRows)

	restore(t, st, backup)
	if _, ok, err := records.Get(ctx, user); err != nil || ok {
		t.Fatalf("after the restore the erasure record is there (%v) or unreadable (%v)", ok, err)
	}
	waitTotals(t, st, keys, before, 30*time.Second)
	if n := exportSizes(t, st, user); n != [3]int{size.reactions, size.comments + 5, size.entries} {
		t.Fatalf("after the restore the export holds %v reactions, comments and entries, want the seeded %d, %d, %d",
			n, size.reactions, size.comments+5, size.entries)
	}
	t.Logf("restored: the user is back with all their data and counts")
	if n := exportSizes(t, st, early); n != [3]int{} {
		t.Fatalf("the user erased before the backup is back: %v", n)
	}

	if rep := replayLog(t, st, restorePoint); rep.Users != 1 || rep.Started != 1 {
		t.Errorf("replay since the restore point asked for %d of %d users' erasures, want the one erased since", rep.Started, rep.Users)
	}
	e = waitReplayed(t, st, user)
	t.Logf("erased again: %d reactions, %d comments, %d history rows", e.Reactions, e.Comments, e.HistoryRows)
	checkExact(t, st, keys, after)
	checkExportEmpty(t, st, early)
	if e, ok, err := records.Get(ctx, early); err != nil || !ok || e.Open() || e.RequestTime.After(restorePoint) {
		t.Errorf("the erasure before the backup was asked for again: %+v", e)
	}

	// The second backup, halfway through an erasure.
	const halfway = "restore-erased-halfway"
	beforeHalf, afterHalf, keysHalf := seedAccount(t, st, halfway, "restore-other-halfway", "rvh", size)
	waitTotals(t, st, keysHalf, beforeHalf, 3*time.Minute)
	keys = append(keys, keysHalf...)
	maps.Copy(after, afterHalf)
	st.proxy.setFault(func(d delivery) (int, bool) {
		return http.StatusServiceUnavailable, d.function == "EraseAccount"
	})
	if code, body := st.call("DELETE", "/v1/me", halfway); code != 202 {
		t.Fatalf("DELETE /v1/me: %d %s", code, body)
	}
	eraser := drillEraser(t, st, records)
	for {
		if _, err := eraser.Run(ctx, halfway); err != nil {
			t.Fatal(err)
		}
		if e, _, _ := records.Get(ctx, halfway); e.Phase == account.Comments {
			break
		}
	}
	restorePoint = time.Now()
	backup = snapshotStores(t, st)
	t.Logf("second backup, the erasure at its comments: %s", backup.summary())
	st.proxy.setFault(nil)
	waitErased(t, st, halfway, 3*time.Minute)
	waitTotals(t, st, keys, after, 3*time.Minute)

	restore(t, st, backup)
	if e, ok, err := records.Get(ctx, halfway); err != nil || !ok || e.Phase != account.Comments {
		t.Fatalf("after the restore the erasure is not back at its comments: %+v, %v", e, err)
	}
	if n := exportSizes(t, st, halfway); n != [3]int{0, size.comments + 5, size.entries} {
		t.Fatalf("after the restore the export holds %v reactions, comments and entries, want none, %d, %d", n, size.comments+5, size.entries)
	}
	t.Logf("restored halfway: no reactions, the comments and history back")
	rep := replayLog(t, st, restorePoint.Add(-24*time.Hour))
	if rep.Users != 3 || rep.Started != 3 {
		t.Errorf("replay from a day before the restore point asked for %d of %d users' erasures, want all 3", rep.Started, rep.Users)
	}
	for _, u := range []string{early, user, halfway} {
		waitReplayed(t, st, u)
		checkExportEmpty(t, st, u)
	}
	checkExact(t, st, keys, after)
	st.checkNothingDeadLettered(t)
}

// erase asks for the user's erasure through the API and waits until it is
// done.
func erase(t *testing.T, st *drillStack, user string) account.Erasure {
	t.Helper()
	if code, body := st.call("DELETE", "/v1/me", user); code != 202 {
		t.Fatalf("DELETE /v1/me: %d %s", code, body)
	}
	return waitErased(t, st, user, 3*time.Minute)
}

// restore writes the backup back, with no scheduled job running meanwhile.
func restore(t *testing.T, st *drillStack, backup *storesSnapshot) {
	t.Helper()
	st.stopScheduler()
	backup.restore(t, st)
	st.startScheduler()
}

// replayLog runs cmd/replayerasures' code on the stack, from since on;
// -restore-skip-replay leaves it out.
func replayLog(t *testing.T, st *drillStack, since time.Time) account.ReplayReport {
	t.Helper()
	if *restoreSkipReplay {
		t.Log("replay skipped (-restore-skip-replay)")
		return account.ReplayReport{}
	}
	var out strings.Builder
	deps, stop := erasurereplay.DepsFrom(st.clients)
	rep, err := erasurereplay.Run(context.Background(), deps, erasurereplay.Options{Since: since, Out: &out})
	stop()
	t.Logf("replay: %s", strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// waitReplayed requires the user's erasure to be under way again, and
// waits until it is done.
func waitReplayed(t *testing.T, st *drillStack, user string) account.Erasure {
	t.Helper()
	e, ok, err := accountstore.New(st.db).Get(context.Background(), user)
	if err != nil || !ok {
		t.Fatalf("no erasure of %s after the replay (%v)", user, err)
	}
	if !e.Open() {
		if n := exportSizes(t, st, user); n != [3]int{} {
			t.Fatalf("the erasure of %s is done, but its export holds %v: the replay did not ask for it again", user, n)
		}
	}
	return waitErased(t, st, user, 3*time.Minute)
}

// checkExact: every counter equals want with nothing pending, equals its
// recount from Spanner's rows, and a reconciliation corrects nothing.
func checkExact(t *testing.T, st *drillStack, keys []string, want map[string]counter.Values) {
	t.Helper()
	ctx := context.Background()
	waitTotals(t, st, keys, want, 3*time.Minute)
	counted, _, err := st.counts.Totals(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := workload.Truth(ctx, st.db, keys)
	if err != nil {
		t.Fatal(err)
	}
	fields := workload.TruthFields()
	for _, k := range keys {
		if c, r := counted[k].Only(fields), truth[k]; c != r {
			t.Errorf("%s: counted %+v, recounted from the rows %+v", k, c, r)
		}
	}
	st.checkReconcile(t)
}

// drillEraser is EraseAccount's eraser on the stack's clients, one step a
// Run.
func drillEraser(t *testing.T, st *drillStack, records *accountstore.Store) *account.Eraser {
	pub := bus.NewPublisher(st.clients.PubSub, st.cfg.PubSub.CounterTopic)
	t.Cleanup(pub.Stop)
	return &account.Eraser{
		Records: records, Reactions: reactionstore.New(st.db), Comments: commentstore.New(st.db, 0),
		History: historystore.New(st.clients.Bigtable), Settings: historystore.NewSettings(st.clients.Firestore),
		RateLimits: func(ctx context.Context, u string) error { return ratelimit.EraseUser(ctx, st.clients.BigtableTx, u) },
		Exports:    accountstore.NewExports(st.clients.Firestore, 0).EraseUser,
		Counters:   pub,
		Settle:     st.cfg.Erasure.Settle, Budget: 0,
	}
}

// exportSizes are the reactions, comments and history entries of the
// user's export.
func exportSizes(t *testing.T, st *drillStack, user string) [3]int {
	t.Helper()
	code, body := st.call("GET", "/v1/me/export", user)
	var doc struct{ Reactions, Comments, History []json.RawMessage }
	if code != 200 || json.Unmarshal([]byte(body), &doc) != nil {
		t.Fatalf("export: %d %.300s", code, body)
	}
	return [3]int{len(doc.Reactions), len(doc.Comments), len(doc.History)}
}
