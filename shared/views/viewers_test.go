package views

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// viewer is the hash of synthetic user i, as history.ViewerHasher makes it.
func viewer(i int) uint64 {
	s := sha256.Sum256(fmt.Appendf(nil, "user-%d", i))
	return binary.BigEndian.Uint64(s[:8])
}

// Below a few hundred viewers the estimate is exact, or one off.
func TestViewersExactWhileSmall(t *testing.T) {
	v := NewViewers()
	for n := 1; n <= 500; n++ {
		v.Add(viewer(n))
		v.Add(viewer(n)) // a second watch of the same user changes nothing
		if got := v.Estimate(); got < int64(n)-1 || got > int64(n)+1 {
			t.Fatalf("%d viewers estimated %d", n, got)
		}
	}
	if got := v.Estimate(); got != 500 {
		t.Errorf("500 viewers estimated %d, want exactly 500", got)
	}
}

// At a million viewers, added to 16 shard sketches, folded through the
// stored form into one (one shard merged twice: a redelivered fold), the
// estimate is within 2%.
func TestViewersMillionWithinTwoPercent(t *testing.T) {
	const n = 1_000_000
	shards := make([]*Viewers, 16)
	for i := range shards {
		shards[i] = NewViewers()
	}
	for i := 0; i < n; i++ {
		shards[i%len(shards)].Add(viewer(i))
	}
	snap := NewViewers()
	for _, s := range append(shards, shards[3]) {
		if err := snap.MergeBytes(s.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := ParseViewers(snap.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got := stored.Estimate()
	rel := math.Abs(float64(got)-n) / n
	t.Logf("%d viewers estimated %d (%.3f%%), sketch %d bytes", n, got, 100*rel, len(snap.Bytes()))
	if rel > 0.02 {
		t.Errorf("%d viewers estimated %d: %.2f%% off, want within 2%%", n, got, 100*rel)
	}
}

func TestViewersEmptyAndBadBytes(t *testing.T) {
	v, err := ParseViewers(nil)
	if err != nil || v.Estimate() != 0 {
		t.Fatalf("empty: %v, %v", v, err)
	}
	if _, err := ParseViewers([]byte{1, 2, 3}); err == nil {
		t.Error("garbage parsed as a sketch")
	}
	a, b := NewViewers(), NewViewers()
	a.Add(viewer(1), viewer(2))
	b.Add(viewer(2), viewer(3))
	if err := a.MergeBytes(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	if got := a.Estimate(); got != 3 {
		t.Errorf("{1,2} ∪ {2,3} estimated %d, want 3", got)
	}
}
