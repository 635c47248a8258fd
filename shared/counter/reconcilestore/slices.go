package reconcilestore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"cloud.google.com/go/spanner"
	"golang.org/x/sync/errgroup"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/internal/counterdb"
	"github.com/videngage/engagement/shared/counter/leasestore"
)

// A reconciliation of every counter is a run of slices: disjoint key ranges,
// each with a stored cursor (ReconcileSlices, 045_jobs.sql). Any invocation
// may work any open slice under the slice's lease (JobLeases); each batch of
// keys is corrected, counted and passed by the cursor in one transaction, so
// a run killed at any point resumes at its cursors and neither corrects nor
// counts a batch twice, nor skips one.

// Tables of the runs.
const (
	tableRuns   = "ReconcileRuns"
	tableSlices = "ReconcileSlices"
)

// DefaultSlices is how many key ranges a run of every counter is cut into.
const DefaultSlices = 64

// slicePage bounds the keys listed at a time inside a slice: a slice's last
// page reads at most this many keys past its end.
const slicePage = 2000

// defaultSliceLease is how long a worker holds a slice without committing a batch:
// each batch renews it, so a killed worker's slice is free again this long
// after its last batch.
const defaultSliceLease = 2 * time.Minute

// keyAlphabet is every character of a content id (^[A-Za-z0-9_-]{1,64}$),
// in byte order: slices cut the space of two-character prefixes evenly.
const keyAlphabet = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// sliceBounds are the exclusive lower bounds of n slices: slice i holds the
// keys k with bounds[i] < k ≤ bounds[i+1] (the last one, every key after).
func sliceBounds(n int) []string {
	const space = len(keyAlphabet) * len(keyAlphabet)
	n = min(max(n, 1), space)
	b := make([]string, n)
	for i := 1; i < n; i++ {
		p := i * space / n
		b[i] = string([]byte{keyAlphabet[p/len(keyAlphabet)], keyAlphabet[p%len(keyAlphabet)]})
	}
	return b
}

// StartRun records a run of every counter in n slices (DefaultSlices when
// n ≤ 0) and returns its id. Nothing is checked yet: WorkSlices does it.
func (s *Store) StartRun(ctx context.Context, n int) (string, error) {
	return s.startRun(ctx, n, nil)
}

// startRun records a run in n slices: of every counter (h nil) or of the
// counters whose truth moved in h.
func (s *Store) startRun(ctx context.Context, n int, h *hours) (string, error) {
	if n <= 0 {
		n = DefaultSlices
	}
	bounds := sliceBounds(n)
	run := s.now().UTC().Format("20060102T150405Z") + "-" + leasestore.NewHolder()[:8]
	var from, to spanner.NullTime
	if h != nil {
		from, to = spanner.NullTime{Time: h.from, Valid: true}, spanner.NullTime{Time: h.to, Valid: true}
	}
	ms := []*spanner.Mutation{spanner.Insert(tableRuns, []string{"RunId", "Slices", "CreateTime", "FromHour", "ToHour"},
		[]any{run, int64(len(bounds)), spanner.CommitTimestamp, from, to})}
	for i, lo := range bounds {
		hi := spanner.NullString{}
		if i+1 < len(bounds) {
			hi = spanner.NullString{StringVal: bounds[i+1], Valid: true}
		}
		ms = append(ms, spanner.Insert(tableSlices,
			[]string{"RunId", "Slice", "After", "Upto", "Cursor", "Done", "Checked", "Corrected", "Skipped", "Batches", "Invocations"},
			[]any{run, int64(i), lo, hi, lo, false, int64(0), int64(0), int64(0), int64(0), int64(0)}))
	}
	if _, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(ms)
	}); err != nil {
		return "", fmt.Errorf("reconcilestore.startRun: %w", err)
	}
	return run, nil
}

// RunStatus is what a run has done so far, from its stored figures.
type RunStatus struct {
	Run string `json:"run"`
	// Scope is Recent for an hourly run, All for a daily one.
	Scope      Scope `json:"scope"`
	Slices     int   `json:"slices"`
	SlicesDone int   `json:"slicesDone"`
	Checked    int   `json:"checked"`
	Corrected  int   `json:"corrected"`
	Skipped    int   `json:"skipped"`
	// Batches counts the committed batches; Invocations the times a worker
	// took up one of its slices.
	Batches     int `json:"batches"`
	Invocations int `json:"invocations"`
}

// Done says every slice is done.
func (r RunStatus) Done() bool { return r.Slices > 0 && r.SlicesDone == r.Slices }

// Run returns a run's figures.
func (s *Store) Run(ctx context.Context, run string) (RunStatus, error) {
	st := RunStatus{Run: run}
	err := s.db.Single().Query(ctx, spanner.Statement{
		SQL: `SELECT COUNT(*), COUNTIF(Done), SUM(Checked), SUM(Corrected), SUM(Skipped), SUM(Batches), SUM(Invocations)
FROM ReconcileSlices WHERE RunId = @run`,
		Params: map[string]any{"run": run},
	}).Do(func(r *spanner.Row) error {
		var n, done int64
		var sums [5]spanner.NullInt64
		if err := r.Columns(&n, &done, &sums[0], &sums[1], &sums[2], &sums[3], &sums[4]); err != nil {
			return err
		}
		st.Slices, st.SlicesDone = int(n), int(done)
		st.Checked, st.Corrected, st.Skipped = int(sums[0].Int64), int(sums[1].Int64), int(sums[2].Int64)
		st.Batches, st.Invocations = int(sums[3].Int64), int(sums[4].Int64)
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("reconcilestore.Run(%s): %w", run, err)
	}
	row, err := s.db.Single().ReadRow(ctx, tableRuns, spanner.Key{run}, []string{"ToHour"})
	if err != nil {
		return st, fmt.Errorf("reconcilestore.Run(%s): %w", run, err)
	}
	var to spanner.NullTime
	if err := row.Columns(&to); err != nil {
		return st, fmt.Errorf("reconcilestore.Run(%s): %w", run, err)
	}
	st.Scope = All
	if to.Valid {
		st.Scope = Recent
	}
	return st, nil
}

// WorkOptions tune WorkSlices.
type WorkOptions struct {
	// Run restricts the work to one run ("": every open slice of any run).
	Run string
	// Workers is how many slices one invocation works at once (default 4;
	// against the emulator their transactions queue).
	Workers int
	// Until is when to stop taking up batches (zero: when ctx ends). A
	// batch under way finishes; the slice's cursor keeps the rest.
	Until time.Time
}

// WorkReport says what one WorkSlices did.
type WorkReport struct {
	Report
	// Slices counts the slices this invocation took up, Finished those it
	// finished; Held those another invocation was working.
	Slices, Finished, Held int
	// Runs are the runs of the slices it finished (CloseRun reports them).
	Runs []string
}

type openSlice struct {
	run   string
	slice int64
}

// WorkSlices works open slices until none is left that it can take or ctx
// ends: each slice is taken under its lease and checked from its cursor, a
// batch of keys at a time. A slice another invocation holds is left to it.
// Stopped by ctx, it returns what it did and ctx's error; what it did is
// stored, and the next invocation resumes from there.
func (s *Store) WorkSlices(ctx context.Context, sources []Source, o WorkOptions) (WorkReport, error) {
	rep := WorkReport{Report: Report{Scope: All, Corrections: []Correction{}}}
	workers := o.Workers
	if workers <= 0 {
		workers = 4
	}
	holder := leasestore.NewHolder()
	tried := map[openSlice]bool{}
	for {
		if !o.Until.IsZero() && !time.Now().Before(o.Until) {
			return rep, nil
		}
		open, err := s.openSlices(ctx, o.Run)
		if err != nil {
			return rep, err
		}
		var todo []openSlice
		for _, sl := range open {
			if !tried[sl] {
				todo = append(todo, sl)
			}
		}
		if len(todo) == 0 {
			return rep, nil
		}
		// Invocations started together spread over the slices.
		rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
		var mu sync.Mutex
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(workers)
		for _, sl := range todo {
			tried[sl] = true
			g.Go(func() error {
				var part Report
				took, finished, err := s.workSlice(gctx, sl, holder, sources, o.Until, &part)
				mu.Lock()
				defer mu.Unlock()
				rep.Checked += part.Checked
				rep.Corrected += part.Corrected
				rep.Skipped += part.Skipped
				rep.Repaired += part.Repaired
				for _, c := range part.Corrections {
					if len(rep.Corrections) < maxReported {
						rep.Corrections = append(rep.Corrections, c)
					}
				}
				switch {
				case !took:
					rep.Held++
				case finished:
					rep.Slices++
					rep.Finished++
					if !slices.Contains(rep.Runs, sl.run) {
						rep.Runs = append(rep.Runs, sl.run)
					}
				default:
					rep.Slices++
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return rep, fmt.Errorf("reconcilestore.WorkSlices: %w", err)
		}
	}
}

func (s *Store) openSlices(ctx context.Context, run string) ([]openSlice, error) {
	sql := `SELECT RunId, Slice FROM ReconcileSlices WHERE Done = FALSE`
	params := map[string]any{}
	if run != "" {
		sql += ` AND RunId = @run`
		params["run"] = run
	}
	var out []openSlice
	err := s.db.Single().Query(ctx, spanner.Statement{SQL: sql, Params: params}).Do(func(r *spanner.Row) error {
		var sl openSlice
		if err := r.Columns(&sl.run, &sl.slice); err != nil {
			return err
		}
		out = append(out, sl)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list open slices: %w", err)
	}
	return out, nil
}

// errSliceMoved: the slice's cursor or lease is not what this worker left
// (another worker took the slice over after the lease expired).
var errSliceMoved = errors.New("reconcile slice moved on without this worker")

func leaseName(sl openSlice) string { return SliceLeaseName(sl.run, int(sl.slice)) }

// SliceLeaseName is the JobLeases name of a run's slice.
func SliceLeaseName(run string, slice int) string { return fmt.Sprintf("reconcile/%s/%d", run, slice) }

// workSlice takes the slice's lease and checks its keys from its cursor to
// its end, a batch at a time. took is false when another holder has it.
func (s *Store) workSlice(ctx context.Context, sl openSlice, holder string, sources []Source, until time.Time, rep *Report) (took, finished bool, err error) {
	lease := leaseName(sl)
	ok, err := s.leases.Lease(ctx, lease, holder, s.sliceLease)
	if err != nil || !ok {
		return false, false, err
	}
	defer func() {
		if err := s.leases.Release(context.WithoutCancel(ctx), lease, holder); err != nil {
			slog.WarnContext(ctx, "reconcile: slice lease not released; it expires by itself", "lease", lease, "error", err.Error())
		}
	}()
	var after string
	var upto spanner.NullString
	var done bool
	var invocations int64
	var recent *hours
	_, err = s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, tableRuns, spanner.Key{sl.run}, []string{"FromHour", "ToHour"})
		if err != nil {
			return err
		}
		var from, to spanner.NullTime
		if err := row.Columns(&from, &to); err != nil {
			return err
		}
		recent = nil
		if from.Valid && to.Valid {
			recent = &hours{from: from.Time, to: to.Time}
		}
		row, err = tx.ReadRow(ctx, tableSlices, spanner.Key{sl.run, sl.slice}, []string{"Cursor", "Upto", "Done", "Invocations"})
		if err != nil {
			return err
		}
		if err := row.Columns(&after, &upto, &done, &invocations); err != nil {
			return err
		}
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(tableSlices, []string{"RunId", "Slice", "Invocations"}, []any{sl.run, sl.slice, invocations + 1})})
	})
	if err != nil {
		return true, false, fmt.Errorf("take up slice %d of %s: %w", sl.slice, sl.run, err)
	}
	if done {
		return true, false, nil
	}
	var fields []counter.Field
	for _, src := range sources {
		fields = append(fields, src.Fields()...)
	}
	out := func() bool { return !until.IsZero() && !time.Now().Before(until) }
	for {
		if out() {
			return true, false, nil
		}
		var keys []string
		var more bool
		err := s.db.InSnapshot(ctx, func(ctx context.Context, tx *spanner.ReadOnlyTransaction) error {
			var err error
			limit := min(s.reconcilePage, slicePage)
			if recent != nil {
				// The counters listed carry their bound: the index range
				// ends at upto.
				keys, err = truthMovedKeysAfter(ctx, tx, *recent, after, upto, limit)
				more = len(keys) == limit
				return err
			}
			var bound string
			var last bool
			keys, bound, last, err = s.keyPageLimit(ctx, tx, sources, after, upto, limit)
			more = !last && (!upto.Valid || bound < upto.StringVal)
			return err
		})
		if err != nil {
			return true, false, fmt.Errorf("slice %d of %s: %w", sl.slice, sl.run, err)
		}
		if upto.Valid {
			n := 0
			for n < len(keys) && keys[n] <= upto.StringVal {
				n++
			}
			keys = keys[:n]
		}
		batches := counterdb.Chunks(keys, reconcileBatch)
		if len(batches) == 0 {
			// Nothing left in the slice: mark it done.
			batches = [][]string{nil}
		}
		for i, batch := range batches {
			if out() {
				return true, false, nil
			}
			step := &sliceStep{slice: sl, holder: holder, lease: lease, ttl: s.sliceLease, from: after, to: after, done: !more && i == len(batches)-1}
			if len(batch) > 0 {
				step.to = batch[len(batch)-1]
			}
			err := s.reconcileBatch(ctx, batch, sources, fields, rep, step, recent == nil)
			if errors.Is(err, errSliceMoved) {
				slog.WarnContext(ctx, "reconcile: slice taken over by another worker; leaving it", "run", sl.run, "slice", sl.slice)
				return true, false, nil
			}
			if err != nil {
				return true, false, fmt.Errorf("slice %d of %s: %w", sl.slice, sl.run, err)
			}
			after = step.to
		}
		if !more {
			return true, true, nil
		}
	}
}

// sliceStep is one batch's move of a slice's cursor, from → to.
type sliceStep struct {
	slice         openSlice
	holder, lease string
	ttl           time.Duration
	from, to      string
	done          bool
	// read by advance, added to by figures.
	checked, corrected, skipped, batches int64
}

// advance checks, inside the batch's transaction, that the worker still
// holds the slice and that its cursor is where the batch starts, and renews
// the lease.
func (st *sliceStep) advance(ctx context.Context, tx *spanner.ReadWriteTransaction, now time.Time) ([]*spanner.Mutation, error) {
	h, err := leasestore.Holder(ctx, tx, st.lease)
	if err != nil {
		return nil, err
	}
	row, err := tx.ReadRow(ctx, tableSlices, spanner.Key{st.slice.run, st.slice.slice}, []string{"Cursor", "Done", "Checked", "Corrected", "Skipped", "Batches"})
	if err != nil {
		return nil, err
	}
	var cursor string
	var done bool
	if err := row.Columns(&cursor, &done, &st.checked, &st.corrected, &st.skipped, &st.batches); err != nil {
		return nil, err
	}
	if h != st.holder || cursor != st.from || done {
		return nil, errSliceMoved
	}
	return []*spanner.Mutation{leasestore.Renew(st.lease, st.holder, now.Add(st.ttl))}, nil
}

// figures is the slice's row after the batch.
func (st *sliceStep) figures(checked, corrected, skipped int) *spanner.Mutation {
	return spanner.Update(tableSlices,
		[]string{"RunId", "Slice", "Cursor", "Done", "Checked", "Corrected", "Skipped", "Batches"},
		[]any{st.slice.run, st.slice.slice, st.to, st.done, st.checked + int64(checked), st.corrected + int64(corrected), st.skipped + int64(skipped), st.batches + 1})
}

// finishRun works the run's slices until every one is done (waiting for
// slices that other invocations hold) or ctx ends, and reports the run's
// stored figures, whoever did the work; Corrections lists this
// invocation's.
func (s *Store) finishRun(ctx context.Context, run string, sources []Source, until time.Time) (Report, error) {
	rep := Report{Scope: All, Run: run, Corrections: []Correction{}}
	wait := 50 * time.Millisecond
	for {
		w, err := s.WorkSlices(ctx, sources, WorkOptions{Run: run, Until: until})
		for _, c := range w.Corrections {
			if len(rep.Corrections) < maxReported {
				rep.Corrections = append(rep.Corrections, c)
			}
		}
		rep.Repaired += w.Repaired
		if err != nil {
			return rep, err
		}
		st, err := s.Run(ctx, run)
		if err != nil {
			return rep, err
		}
		rep.Checked, rep.Corrected, rep.Skipped = st.Checked, st.Corrected, st.Skipped
		if st.Done() {
			rep.Done = true
			return rep, nil
		}
		if !until.IsZero() && !time.Now().Before(until) {
			// Out of time: the slices' cursors keep the rest for the
			// invocations that work open slices.
			return rep, nil
		}
		// Some slices are another invocation's: wait for them.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return rep, fmt.Errorf("run %s: %d of %d slices done: %w", run, st.SlicesDone, st.Slices, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// CloseRun marks a finished run reported and returns its figures; closed is
// true for exactly one caller, the one to report it, and false while the
// run is not done or once it was closed.
func (s *Store) CloseRun(ctx context.Context, run string) (st RunStatus, closed bool, err error) {
	st, err = s.Run(ctx, run)
	if err != nil || !st.Done() {
		return st, false, err
	}
	_, err = s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		closed = false
		row, err := tx.ReadRow(ctx, tableRuns, spanner.Key{run}, []string{"CloseTime"})
		if err != nil {
			return err
		}
		var t spanner.NullTime
		if err := row.Columns(&t); err != nil {
			return err
		}
		if t.Valid {
			return nil
		}
		closed = true
		return tx.BufferWrite([]*spanner.Mutation{spanner.Update(tableRuns, []string{"RunId", "CloseTime"}, []any{run, spanner.CommitTimestamp})})
	})
	if err != nil {
		return st, false, fmt.Errorf("reconcilestore.CloseRun(%s): %w", run, err)
	}
	return st, closed, nil
}
