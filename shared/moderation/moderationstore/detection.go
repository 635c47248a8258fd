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

// StartWatermarks sets the watermarks of names that have none to at, in
// one transaction (a concurrent start leaves the other's values).
func (s *Store) StartWatermarks(ctx context.Context, names []string, at time.Time) error {
	_, err := s.db.InTx(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
		keys := make([]spanner.KeySet, len(names))
		for i, n := range names {
			keys[i] = spanner.Key{n}
		}
		have := map[string]bool{}
		if err := tx.Read(ctx, tableWatermarks, spanner.KeySets(keys...), []string{"Name"}).Do(func(r *spanner.Row) error {
			var n string
			if err := r.Columns(&n); err != nil {
				return err
			}
			have[n] = true
			return nil
		}); err != nil {
			return err
		}
		var ms []*spanner.Mutation
		for _, n := range names {
			if !have[n] {
				ms = append(ms, spanner.Insert(tableWatermarks, []string{"Name", "Watermark", "UpdateTime"}, []any{n, at, spanner.CommitTimestamp}))
			}
		}
		return tx.BufferWrite(ms)
	})
	if err != nil {
		return fmt.Errorf("moderationstore.StartWatermarks: %w", err)
	}
	return nil
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
// spike is recorded twice. A watermark that is not at `from` any more is
// ErrWatermarkMoved.
func (s *Store) SavePartial(ctx context.Context, name string, partitions, part int, from, to time.Time, p moderation.Partial, spikes []moderation.Spike, baseline time.Duration) error {
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

// SaveMergeShare keeps what share (of the merge of the step ending at
// stepEnd, over buckets buckets of partitions partitions) found. Writing it
// again writes the same.
func (s *Store) SaveMergeShare(ctx context.Context, stepEnd time.Time, partitions, buckets, share int, ps moderation.PairShare) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(ps); err != nil {
		return fmt.Errorf("moderationstore.SaveMergeShare: %w", err)
	}
	_, err := s.db.Client.Apply(ctx, []*spanner.Mutation{spanner.InsertOrUpdate(tableMergeShares,
		[]string{"StepEnd", "Partitions", "Buckets", "Share", "Data", "CreateTime"},
		[]any{stepEnd, int64(partitions), int64(buckets), int64(share), buf.Bytes(), spanner.CommitTimestamp})})
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
	_, err := s.db.Client.Apply(ctx, []*spanner.Mutation{
		spanner.Delete(tablePartials, spanner.Key{stepEnd, int64(partitions)}.AsPrefix()),
		spanner.Delete(tableMergeShares, spanner.Key{stepEnd, int64(partitions)}.AsPrefix()),
	})
	if err != nil {
		return fmt.Errorf("moderationstore.DropPartials(%v): %w", stepEnd, err)
	}
	return nil
}
