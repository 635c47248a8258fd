package moderationstore

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/grpc/codes"

	"github.com/videngage/engagement/shared/moderation"
)

// The partitioned detection's state (105_detection_partitions.sql): each
// partition hands its share of a step to the merge in DetectionPartials, in
// the transaction that moves its watermark and records its spikes; each
// share of the step's merge keeps what it found in DetectionMergeShares
// (107_detection_merge_shares.sql) for the merge's last stage.

const (
	tablePartials    = "DetectionPartials"
	tableMergeShares = "DetectionMergeShares"
	// partialChunk bounds the candidates of one DetectionPartials row (a
	// few MiB encoded, under Spanner's 10 MiB a cell).
	partialChunk = 40_000
)

// Watermarks returns the watermarks of names that exist.
func (s *Store) Watermarks(ctx context.Context, names []string) (map[string]time.Time, error) {
	keys := make([]spanner.KeySet, len(names))
	for i, n := range names {
		keys[i] = spanner.Key{n}
	}
	out := map[string]time.Time{}
	err := s.db.Single().Read(ctx, tableWatermarks, spanner.KeySets(keys...), []string{"Name", "Watermark"}).Do(func(r *spanner.Row) error {
		var n string
		var w time.Time
		if err := r.Columns(&n, &w); err != nil {
			return err
		}
		out[n] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("moderationstore.Watermarks: %w", err)
	}
	return out, nil
}

// layoutOf reads the layout record name (a JobWatermarks row: Since in
// Watermark, the layouts in Cursor) through read; ok is false while there
// is none.
func layoutOf(row *spanner.Row, err error) (moderation.Layouts, bool, error) {
	if spanner.ErrCode(err) == codes.NotFound {
		return moderation.Layouts{}, false, nil
	}
	if err != nil {
		return moderation.Layouts{}, false, err
	}
	var since time.Time
	var text spanner.NullString
	if err := row.Columns(&since, &text); err != nil {
		return moderation.Layouts{}, false, err
	}
	ls, err := moderation.DecodeLayouts(text.StringVal, since)
	return ls, err == nil, err
}

var layoutColumns = []string{"Watermark", "Cursor"}

// Layouts reads the detection's layout record name; ok is false while
// there is none (every step so far was cut by moderation.LegacyLayout).
func (s *Store) Layouts(ctx context.Context, name string) (ls moderation.Layouts, ok bool, err error) {
	ls, ok, err = layoutOf(s.db.Single().ReadRow(ctx, tableWatermarks, spanner.Key{name}, layoutColumns))
	if err != nil {
		return ls, false, fmt.Errorf("moderationstore.Layouts: %w", err)
	}
	return ls, ok, nil
}

// SwitchLayout makes next the layout of the detection's steps from the
// first one the current layout's partitions have not begun: Since is the
// latest of the merge's watermark (job) and the current partitions'
// (partition(n, i)), and next's partitions start there. Steps before it
// are finished under the current layout, which becomes the previous one.
// seen is the record the caller read (nil: none); a record that changed
// since, or one whose previous layout still has steps to merge (the merge's
// watermark before Since), is ErrWatermarkMoved. With no merge watermark (the first run) the
// merge starts at first. One transaction: a partition's SavePartial, which
// reads the record, either commits before the switch (and Since is past
// its step) or finds its step under the next layout and stores nothing.
func (s *Store) SwitchLayout(ctx context.Context, name, job string, seen *moderation.Layouts, next moderation.Layout, partition func(n, i int) string, first time.Time) (moderation.Layouts, error) {
	var out moderation.Layouts
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		rec, ok, err := layoutOf(tx.ReadRow(ctx, tableWatermarks, spanner.Key{name}, layoutColumns))
		if err != nil {
			return err
		}
		if ok != (seen != nil) || ok && rec != *seen {
			return ErrWatermarkMoved
		}
		cur := moderation.LegacyLayout
		if ok {
			cur = rec.Current
		}
		read := func(names []string) (map[string]time.Time, error) {
			keys := make([]spanner.KeySet, len(names))
			for i, n := range names {
				keys[i] = spanner.Key{n}
			}
			got := map[string]time.Time{}
			err := tx.Read(ctx, tableWatermarks, spanner.KeySets(keys...), []string{"Name", "Watermark"}).Do(func(r *spanner.Row) error {
				var n string
				var w time.Time
				if err := r.Columns(&n, &w); err != nil {
					return err
				}
				got[n] = w
				return nil
			})
			return got, err
		}
		names := func(l moderation.Layout) []string {
			var ns []string
			for i := range l.Partitions {
				ns = append(ns, partition(l.Partitions, i))
			}
			return ns
		}
		marks, err := read(append([]string{job}, names(cur)...))
		if err != nil {
			return err
		}
		var ms []*spanner.Mutation
		cols := []string{"Name", "Watermark", "UpdateTime"}
		since, started := marks[job]
		if ok && started && since.Before(rec.Since) {
			return ErrWatermarkMoved
		}
		if !started {
			since = first
			ms = append(ms, spanner.Insert(tableWatermarks, cols, []any{job, first, spanner.CommitTimestamp}))
		}
		for _, n := range names(cur) {
			if w, ok := marks[n]; ok && w.After(since) {
				since = w
			}
		}
		have := marks
		if next.Partitions != cur.Partitions {
			have = map[string]time.Time{} // next's rows, whatever they hold, move to since
		}
		for _, n := range names(next) {
			if _, ok := have[n]; !ok {
				ms = append(ms, spanner.InsertOrUpdate(tableWatermarks, cols, []any{n, since, spanner.CommitTimestamp}))
			}
		}
		out = moderation.Layouts{Since: since, Current: next, Previous: cur}
		ms = append(ms, spanner.InsertOrUpdate(tableWatermarks, []string{"Name", "Watermark", "Cursor", "UpdateTime"},
			[]any{name, since, out.Encode(), spanner.CommitTimestamp}))
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return moderation.Layouts{}, fmt.Errorf("moderationstore.SwitchLayout(%v): %w", next, err)
	}
	return out, nil
}

// partialChunkData is one stored chunk of a Partial: the first (chunk 0)
// carries the sketch and the figures only, the others the candidates, so
// the step's sketches are read without its candidates.
type partialChunkData struct {
	Candidates          []moderation.Reaction
	Accounts            []byte
	Rows, Popular, Kept int
}

// SavePartial stores partition part's (of partitions) share of the step
// ending at to, writes its spikes to the audit trail (for review, counts
// untouched), and moves the partition's watermark (name) from `from` to
// `to`, in one transaction: a partition killed before it commits is read
// again whole by the next invocation, and one that committed is not, so no
// spike is recorded twice. A watermark that is not at `from` any more, or a
// step the layout record (layout, SwitchLayout) gives another number of
// partitions, is ErrWatermarkMoved.
func (s *Store) SavePartial(ctx context.Context, layout, name string, partitions, part int, from, to time.Time, p moderation.Partial, spikes []moderation.Spike, baseline time.Duration) error {
	var ms []*spanner.Mutation
	for c := 0; c == 0 || (c-1)*partialChunk < len(p.Candidates); c++ {
		d := partialChunkData{Accounts: p.Accounts, Rows: p.Rows, Popular: p.Popular, Kept: len(p.Candidates)}
		if c > 0 {
			d = partialChunkData{Candidates: p.Candidates[(c-1)*partialChunk : min(c*partialChunk, len(p.Candidates))]}
		}
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(d); err != nil {
			return fmt.Errorf("moderationstore.SavePartial: %w", err)
		}
		ms = append(ms, spanner.InsertOrUpdate(tablePartials, []string{"StepEnd", "Partitions", "Part", "Chunk", "Data", "CreateTime"},
			[]any{to, int64(partitions), int64(part), int64(c), buf.Bytes(), spanner.CommitTimestamp}))
	}
	for _, sp := range spikes {
		ev := sp.Evidence(baseline)
		ms = append(ms, Record(moderation.Entry{
			Action: moderation.ActionReview, Actor: moderation.DetectorSpikes, ActorKind: moderation.ActorAutomatic,
			VideoID: sp.Item.ContentID, Reason: ev.Summary(), Evidence: &ev,
		})...)
	}
	ms = append(ms, spanner.Update(tableWatermarks, []string{"Name", "Watermark", "UpdateTime"}, []any{name, to, spanner.CommitTimestamp}))
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		row, err := tx.ReadRow(ctx, tableWatermarks, spanner.Key{name}, []string{"Watermark"})
		if spanner.ErrCode(err) == codes.NotFound {
			return ErrWatermarkMoved
		}
		if err != nil {
			return fmt.Errorf("read watermark: %w", err)
		}
		var w time.Time
		if err := row.Columns(&w); err != nil {
			return err
		}
		if !w.Equal(from) {
			return ErrWatermarkMoved
		}
		ls, ok, err := layoutOf(tx.ReadRow(ctx, tableWatermarks, spanner.Key{layout}, layoutColumns))
		if err != nil {
			return fmt.Errorf("read layout: %w", err)
		}
		if !ok {
			ls = moderation.Layouts{Current: moderation.LegacyLayout, Previous: moderation.LegacyLayout}
		}
		if ls.At(from).Partitions != partitions {
			return ErrWatermarkMoved
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return fmt.Errorf("moderationstore.SavePartial(%s): %w", name, err)
	}
	return nil
}

// Partials reads the shares of partitions [lo, hi) (of partitions) of the
// step ending at stepEnd.
func (s *Store) Partials(ctx context.Context, stepEnd time.Time, partitions, lo, hi int) ([]moderation.Partial, error) {
	keys := spanner.KeyRange{Start: spanner.Key{stepEnd, int64(partitions), int64(lo)}, End: spanner.Key{stepEnd, int64(partitions), int64(hi)}, Kind: spanner.ClosedOpen}
	out, err := s.partials(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("moderationstore.Partials(%v, %d..%d): %w", stepEnd, lo, hi, err)
	}
	return out, nil
}

// PartialHeads reads every partition's sketch and figures of the step
// ending at stepEnd, without the candidates, by partition (a partition
// with no share stored is the zero Partial).
func (s *Store) PartialHeads(ctx context.Context, stepEnd time.Time, partitions int) ([]moderation.Partial, error) {
	keys := make([]spanner.KeySet, partitions)
	for i := range partitions {
		keys[i] = spanner.Key{stepEnd, int64(partitions), int64(i), int64(0)}
	}
	out := make([]moderation.Partial, partitions)
	err := s.eachChunk(ctx, spanner.KeySets(keys...), func(part int64, d partialChunkData) {
		if part >= 0 && part < int64(partitions) {
			out[part] = moderation.Partial{Accounts: d.Accounts, Rows: d.Rows, Popular: d.Popular, Kept: d.Kept}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("moderationstore.PartialHeads(%v): %w", stepEnd, err)
	}
	return out, nil
}

func (s *Store) eachChunk(ctx context.Context, keys spanner.KeySet, f func(part int64, d partialChunkData)) error {
	return s.db.Single().Read(ctx, tablePartials, keys, []string{"Part", "Data"}).Do(func(r *spanner.Row) error {
		var part int64
		var data []byte
		if err := r.Columns(&part, &data); err != nil {
			return err
		}
		var d partialChunkData
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&d); err != nil {
			return err
		}
		f(part, d)
		return nil
	})
}

func (s *Store) partials(ctx context.Context, keys spanner.KeySet) ([]moderation.Partial, error) {
	byPart := map[int64]*moderation.Partial{}
	var order []int64
	err := s.eachChunk(ctx, keys, func(part int64, d partialChunkData) {
		p := byPart[part]
		if p == nil {
			p = &moderation.Partial{}
			byPart[part] = p
			order = append(order, part)
		}
		p.Candidates = append(p.Candidates, d.Candidates...)
		if d.Accounts != nil {
			p.Accounts, p.Rows, p.Popular, p.Kept = d.Accounts, d.Rows, d.Popular, d.Kept
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]moderation.Partial, 0, len(order))
	for _, p := range order {
		out = append(out, *byPart[p])
	}
	return out, nil
}

// HasMergeShare reports whether share (of the merge of the step ending at
// stepEnd, over buckets buckets of partitions partitions) is saved, without
// reading it.
func (s *Store) HasMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int) (bool, error) {
	_, err := s.db.Single().ReadRow(ctx, tableMergeShares, spanner.Key{stepEnd, int64(partitions), int64(buckets), int64(share)}, []string{"Share"})
	switch {
	case spanner.ErrCode(err) == codes.NotFound:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("moderationstore.HasMergeShare(%v, %d): %w", stepEnd, share, err)
	}
	return true, nil
}

// SaveMergeShare keeps what share (of the merge of the step ending at
// stepEnd, over buckets buckets of partitions partitions) found. Writing it
// again writes the same.
func (s *Store) SaveMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int, ps moderation.PairShare) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(ps); err != nil {
		return fmt.Errorf("moderationstore.SaveMergeShare: %w", err)
	}
	err := s.write(ctx, spanner.InsertOrUpdate(tableMergeShares,
		[]string{"StepEnd", "Partitions", "Buckets", "Share", "Data", "CreateTime"},
		[]any{stepEnd, int64(partitions), int64(buckets), int64(share), buf.Bytes(), spanner.CommitTimestamp}))
	if err != nil {
		return fmt.Errorf("moderationstore.SaveMergeShare(%v, %d): %w", stepEnd, share, err)
	}
	return nil
}

// MergeShares reads the shares of the step's merge saved so far, by share.
func (s *Store) MergeShares(ctx context.Context, stepEnd time.Time, partitions, buckets int) (map[int]moderation.PairShare, error) {
	out := map[int]moderation.PairShare{}
	err := s.db.Single().Read(ctx, tableMergeShares, spanner.Key{stepEnd, int64(partitions), int64(buckets)}.AsPrefix(),
		[]string{"Share", "Data"}).Do(func(r *spanner.Row) error {
		var share int64
		var data []byte
		if err := r.Columns(&share, &data); err != nil {
			return err
		}
		var ps moderation.PairShare
		if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&ps); err != nil {
			return err
		}
		out[int(share)] = ps
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("moderationstore.MergeShares(%v): %w", stepEnd, err)
	}
	return out, nil
}

// DropPartials deletes the partitions' shares of the step ending at
// stepEnd and its merge's shares (its merge committed).
func (s *Store) DropPartials(ctx context.Context, stepEnd time.Time, partitions int) error {
	err := s.write(ctx,
		spanner.Delete(tablePartials, spanner.Key{stepEnd, int64(partitions)}.AsPrefix()),
		spanner.Delete(tableMergeShares, spanner.Key{stepEnd, int64(partitions)}.AsPrefix()),
	)
	if err != nil {
		return fmt.Errorf("moderationstore.DropPartials(%v): %w", stepEnd, err)
	}
	return nil
}

// write commits ms in a transaction of their own through spannerdb.InTx,
// which takes its turn against the emulator (one read-write transaction
// at a time): a bare Client.Apply there drops the stack's other writes.
func (s *Store) write(ctx context.Context, ms ...*spanner.Mutation) error {
	_, err := s.db.InTx(ctx, func(_ context.Context, tx *spanner.ReadWriteTransaction) error {
		return tx.BufferWrite(ms)
	})
	return err
}
