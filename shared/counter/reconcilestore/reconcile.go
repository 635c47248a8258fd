package reconcilestore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
)

// Source is a source of truth for some fields of the counters: reactions own
// likes and dislikes, comments own comments and replies. Reconciliation reads
// every source and the counters in one read-only transaction, so that all of
// them describe the same timestamp.
type Source interface {
	// Name names the source in logs.
	Name() string
	// Fields are the fields it owns; no two sources own the same field.
	Fields() []counter.Field
	// KeysAfter lists, in order and without repeats, up to limit keys after
	// the given one ("": from the first) that the source has truth for. A
	// key whose truth is zero may be left out: if it has a counter, the
	// listing of the counters covers it.
	KeysAfter(ctx context.Context, tx *spanner.ReadOnlyTransaction, after string, limit int) ([]string, error)
	// Truth recounts its fields of keys at tx's timestamp.
	Truth(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error)
}

// An Auditor is a Source whose Truth reads a tally kept by the writes
// themselves. The daily run also recounts the rows (Audit), takes the
// recount as the truth, and repairs a tally that differs (Repair) in the
// transaction that writes the batch's corrections and moves the slice's
// cursor, so that no repair is written twice.
type Auditor interface {
	Source
	// Audit recounts its fields of keys from the rows at tx's timestamp and
	// returns, for the keys whose tally is complete, the tally's guard.
	Audit(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string) (truth map[string]counter.Values, guards map[string]spanner.NullTime, err error)
	// Repair returns the mutations that add each fix to its key's tally if
	// the key's guard is still what Audit returned, recording readAt as the
	// new guard, and the keys repaired.
	Repair(ctx context.Context, tx *spanner.ReadWriteTransaction, fixes map[string]counter.Values, guards map[string]spanner.NullTime, readAt time.Time) ([]*spanner.Mutation, []string, error)
}

// Scope of a reconciliation run.
type Scope string

const (
	// Recent checks the counters whose truth moved since the previous
	// hourly run (hourly; see StartRecentRun).
	Recent Scope = "recent"
	// All checks every counter (daily).
	All Scope = "all"
)

// reconcileBatch is how many counters one read-only transaction checks.
const reconcileBatch = 200

// defaultReconcilePage is how many keys an All run lists from each of the
// counters and the sources at a time: its memory is bounded by a few pages
// however many counters there are.
const defaultReconcilePage = 10_000

// Correction is one repaired counter.
type Correction struct {
	Key   string         `json:"key"`
	Delta counter.Values `json:"delta"`
}

// Report says what a run checked and corrected.
type Report struct {
	Scope Scope `json:"scope"`
	// Run is the run of every counter the figures are of (scope all), and
	// Done says it is complete (recent: always).
	Run         string       `json:"run,omitempty"`
	Done        bool         `json:"done"`
	Checked     int          `json:"checked"`
	Corrected   int          `json:"corrected"`
	Skipped     int          `json:"skipped"` // corrected meanwhile by another run
	Corrections []Correction `json:"corrections"`
	// Repaired counts the tallies the daily run repaired from their rows.
	Repaired int `json:"repaired"`
}

// maxReported bounds the corrections listed in a report (all are logged).
const maxReported = 100

// Reconcile compares counters with their sources of truth and writes a
// correction delta where they differ.
//
// For each batch of keys it reads, in one read-only transaction at timestamp
// T: the truth (sources), the counted value (snapshot + shards) and the
// pending value (outbox rows of changes not yet counted). At T every change
// is either counted or pending, never both (the consumer deletes the outbox
// row in the transaction that counts it), so
//
//	correction = truth − counted − pending
//
// is zero for a right counter whatever is in flight, and exactly the drift
// otherwise. Changes after T add to truth and to pending alike and do not
// enter the correction. The correction is added to the snapshot in a
// read-write transaction that first checks the counter's ReconcileTime is
// still what it was at T, so that two runs never both apply a correction for
// the same drift.
//
// All starts a run of every counter in slices (StartRun), Recent one of the
// counters whose truth moved since the previous hourly run
// (StartRecentRun); either is worked here until it is done or until (zero:
// no limit) passes, the rest by WorkSlices.
func (s *Store) Reconcile(ctx context.Context, scope Scope, sources []Source) (Report, error) {
	return s.ReconcileUntil(ctx, scope, sources, time.Time{})
}

// ReconcileUntil is Reconcile that stops working a run of every counter at
// until, leaving the rest to WorkSlices.
func (s *Store) ReconcileUntil(ctx context.Context, scope Scope, sources []Source, until time.Time) (Report, error) {
	rep := Report{Scope: scope, Corrections: []Correction{}}
	var err error
	var run string
	switch scope {
	case Recent:
		run, err = s.StartRecentRun(ctx, 0)
	case All:
		run, err = s.StartRun(ctx, 0)
	default:
		err = fmt.Errorf("unknown scope %q", scope)
	}
	if err == nil {
		rep, err = s.finishRun(ctx, run, sources, until)
		rep.Scope = scope
	}
	if err != nil {
		return rep, fmt.Errorf("reconcilestore.Reconcile: %w", err)
	}
	return rep, nil
}

// keyPageLimit lists the next keys after `after` (up to upto, when valid) of
// the counters and of every source, merged: up to a page from each list, and of their union only the
// keys up to the smallest last key of a list that filled its page (beyond
// it, that list may hold keys not yet seen). The next page starts after the
// last key returned; done says no list had more.
func (s *Store) keyPageLimit(ctx context.Context, tx *spanner.ReadOnlyTransaction, sources []Source, after string, upto spanner.NullString, limit int) (keys []string, last string, done bool, err error) {
	counters, err := counterKeysAfter(ctx, tx, after, upto, limit)
	if err != nil {
		return nil, "", false, err
	}
	lists := [][]string{counters}
	for _, src := range sources {
		ks, err := src.KeysAfter(ctx, tx, after, limit)
		if err != nil {
			return nil, "", false, fmt.Errorf("%s: list keys: %w", src.Name(), err)
		}
		lists = append(lists, ks)
	}
	bound, full := "", false
	for _, l := range lists {
		if len(l) >= limit && (!full || l[len(l)-1] < bound) {
			bound, full = l[len(l)-1], true
		}
	}
	set := map[string]bool{}
	for _, l := range lists {
		for _, k := range l {
			if k > after && (!full || k <= bound) {
				set[k] = true
			}
		}
	}
	keys = counterdb.SortedKeys(set)
	if !full {
		return keys, "", true, nil
	}
	return keys, bound, false, nil
}

// counterKeysAfter lists up to limit counters after `after`, up to upto when
// valid: one key-range read (the emulator runs an SQL query as a scan of
// the whole table; a read, of the range only).
func counterKeysAfter(ctx context.Context, tx *spanner.ReadOnlyTransaction, after string, upto spanner.NullString, limit int) ([]string, error) {
	r := spanner.KeyRange{Start: spanner.Key{after}, End: spanner.Key{}, Kind: spanner.OpenClosed}
	if upto.Valid {
		r.End = spanner.Key{upto.StringVal}
	}
	var out []string
	err := tx.ReadWithOptions(ctx, counterdb.Counters, r, []string{"CounterKey"}, &spanner.ReadOptions{Limit: limit}).Do(func(r *spanner.Row) error {
		var k string
		if err := counterdb.Columns(r, &k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list counters: %w", err)
	}
	return out, nil
}

// view is what one read-only transaction saw of a batch of counters.
type view struct {
	readAt                  time.Time
	counted, pending, truth map[string]counter.Values
	guards                  map[string]spanner.NullTime
	// repairs are the auditors' tallies to repair (audited runs), by
	// auditor, with their guards.
	repairs []repair
}

// repair is one auditor's fixes of its tallies.
type repair struct {
	auditor Auditor
	fixes   map[string]counter.Values
	guards  map[string]spanner.NullTime
}

// reconcileBatch checks keys; audit (the daily run) takes the auditors'
// recounts as their truth and repairs their tallies.
func (s *Store) reconcileBatch(ctx context.Context, keys []string, sources []Source, fields []counter.Field, rep *Report, step *sliceStep, audit bool) error {
	var v view
	err := s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
		var err error
		v, err = readView(ctx, tx, keys, sources, audit)
		return err
	})
	if err != nil {
		return err
	}
	fixes := map[string]counter.Values{}
	for _, k := range keys {
		if c := counter.Correction(v.truth[k], v.counted[k], v.pending[k], fields); !c.IsZero() {
			fixes[k] = c
		}
	}
	applied, repaired, err := s.correct(ctx, fixes, v.guards, v.readAt, len(keys), step, v.repairs)
	if err != nil {
		return err
	}
	rep.Checked += len(keys)
	rep.Repaired += repaired
	for _, k := range keys {
		c, ok := fixes[k]
		if !ok {
			continue
		}
		if !applied[k] {
			rep.Skipped++
			slog.InfoContext(ctx, "reconcile: counter corrected by another run meanwhile; left for the next run", "counterKey", k)
			continue
		}
		rep.Corrected++
		if len(rep.Corrections) < maxReported {
			rep.Corrections = append(rep.Corrections, Correction{Key: k, Delta: c})
		}
		slog.InfoContext(ctx, "reconcile: counter corrected", "counterKey", k, "delta", c,
			"truth", v.truth[k].Only(fields), "counted", v.counted[k].Only(fields), "pending", v.pending[k].Only(fields),
			"readTime", v.readAt)
	}
	return nil
}

func readView(ctx context.Context, tx *spanner.ReadOnlyTransaction, keys []string, sources []Source, audit bool) (view, error) {
	var v view
	if len(keys) == 0 {
		// A slice's last, empty step: nothing to read.
		return v, nil
	}
	counted, guards, err := counterdb.Counted(ctx, tx, keys)
	if err != nil {
		return v, err
	}
	readAt, err := tx.Timestamp()
	if err != nil {
		return v, err
	}
	pending, err := counterdb.PendingSums(ctx, tx, keys)
	if err != nil {
		return v, err
	}
	truth := map[string]counter.Values{}
	var repairs []repair
	for _, src := range sources {
		t, err := src.Truth(ctx, tx, keys)
		if err != nil {
			return v, fmt.Errorf("%s: recount: %w", src.Name(), err)
		}
		if a, ok := src.(Auditor); ok && audit {
			rows, tg, err := a.Audit(ctx, tx, keys)
			if err != nil {
				return v, fmt.Errorf("%s: audit: %w", src.Name(), err)
			}
			r := repair{auditor: a, fixes: map[string]counter.Values{}, guards: tg}
			for k := range tg {
				if fix := rows[k].Only(src.Fields()).Minus(t[k].Only(src.Fields())); !fix.IsZero() {
					r.fixes[k] = fix
				}
			}
			if len(r.fixes) > 0 {
				repairs = append(repairs, r)
			}
			t = rows
		}
		for k, n := range t {
			truth[k] = truth[k].Plus(n.Only(src.Fields()))
		}
	}
	v = view{readAt: readAt, counted: counted, pending: pending, truth: truth, guards: guards, repairs: repairs}
	return v, nil
}

// correct adds each fix to its counter's snapshot if no correction was
// written since the read (ReconcileTime unchanged), recording readAt as
// ReconcileTime, all in one read-write transaction; with a slice step, the
// same transaction advances the slice's cursor over the batch and adds the
// batch's figures to the slice's, so that a run stopped at any point and
// resumed neither corrects nor counts a batch twice. applied says which
// fixes were written. The auditors' repairs of their tallies are written in
// the same transaction; repaired counts them.
func (s *Store) correct(ctx context.Context, fixes map[string]counter.Values, guards map[string]spanner.NullTime, readAt time.Time, checked int, step *sliceStep, repairs []repair) (map[string]bool, int, error) {
	if len(fixes) == 0 && step == nil && len(repairs) == 0 {
		return nil, 0, nil
	}
	var applied map[string]bool
	var repaired int
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		applied, repaired = map[string]bool{}, 0
		var ms []*spanner.Mutation
		for _, r := range repairs {
			rms, keys, err := r.auditor.Repair(ctx, tx, r.fixes, r.guards, readAt)
			if err != nil {
				return fmt.Errorf("%s: repair tallies: %w", r.auditor.Name(), err)
			}
			ms = append(ms, rms...)
			repaired += len(keys)
			for _, k := range keys {
				slog.InfoContext(ctx, "reconcile: tally repaired from its rows", "source", r.auditor.Name(), "counterKey", k,
					"delta", r.fixes[k], "readTime", readAt)
			}
		}
		if step != nil {
			m, err := step.advance(ctx, tx, s.now())
			if err != nil {
				return err
			}
			ms = append(ms, m...)
		}
		keys := counterdb.SortedKeys(fixes)
		var ks []spanner.Key
		for _, k := range keys {
			ks = append(ks, spanner.Key{k})
		}
		type row struct {
			t spanner.NullTime
			v counter.Values
		}
		rows := map[string]row{}
		if len(ks) > 0 {
			cols := append([]string{"CounterKey", "ReconcileTime"}, counterdb.ValueColumns...)
			err := tx.Read(ctx, counterdb.Counters, spanner.KeySetFromKeys(ks...), cols).Do(func(r *spanner.Row) error {
				var k string
				var rw row
				if err := counterdb.Columns(r, &k, &rw.t); err != nil {
					return err
				}
				v, err := counterdb.ReadValues(r, 2)
				rw.v = v
				rows[k] = rw
				return err
			})
			if err != nil {
				return fmt.Errorf("read counters: %w", err)
			}
		}
		for _, k := range keys {
			c, guard := fixes[k], guards[k]
			cur, ok := rows[k]
			if !ok {
				// No snapshot yet.
				if guard.Valid {
					continue
				}
				cols, vals := counterdb.WithValues([]string{"CounterKey", "Shards", "ReconcileTime"}, []any{k, int64(counter.MinShards), readAt}, c)
				ms = append(ms, spanner.Insert(counterdb.Counters, cols, vals))
				applied[k] = true
				continue
			}
			if cur.t.Valid != guard.Valid || cur.t.Valid && !cur.t.Time.Equal(guard.Time) {
				continue
			}
			cols, vals := counterdb.WithValues([]string{"CounterKey", "ReconcileTime"}, []any{k, readAt}, cur.v.Plus(c))
			ms = append(ms, spanner.Update(counterdb.Counters, cols, vals))
			applied[k] = true
		}
		if step != nil {
			ms = append(ms, step.figures(checked, len(applied), len(fixes)-len(applied)))
		}
		if len(ms) == 0 {
			return nil
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("write corrections: %w", err)
	}
	return applied, repaired, nil
}
