package counter

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFieldsAndColumns(t *testing.T) {
	for i, f := range Fields {
		if f.Column() != Columns[i] {
			t.Errorf("%s: column %s, want %s", f, f.Column(), Columns[i])
		}
		if g, err := ParseField(string(f)); err != nil || g != f {
			t.Errorf("ParseField(%s) = %s, %v", f, g, err)
		}
	}
	if _, err := ParseField("shares"); err == nil {
		t.Error("unknown field accepted")
	}
}

func TestValidKey(t *testing.T) {
	for _, k := range []string{"a", "A-b_9", string(make([]byte, 0)) + "x123456789012345678901234567890123456789012345678901234567890123"} {
		if !ValidKey(k) {
			t.Errorf("%q rejected", k)
		}
	}
	for _, k := range []string{"", "a b", "a/b", "é", "x1234567890123456789012345678901234567890123456789012345678901234"} {
		if ValidKey(k) {
			t.Errorf("%q accepted", k)
		}
	}
}

func TestValuesArithmetic(t *testing.T) {
	a := Values{Likes: 3, Dislikes: -1, Views: 5}
	b := Values{Likes: 1, Comments: 2}
	if got := a.Plus(b); got != (Values{Likes: 4, Dislikes: -1, Comments: 2, Views: 5}) {
		t.Errorf("Plus = %+v", got)
	}
	if got := a.Minus(b); got != (Values{Likes: 2, Dislikes: -1, Comments: -2, Views: 5}) {
		t.Errorf("Minus = %+v", got)
	}
	if got := a.Clamped(); got != (Values{Likes: 3, Views: 5}) {
		t.Errorf("Clamped = %+v", got)
	}
	if got := a.Only([]Field{Likes, Dislikes}); got != (Values{Likes: 3, Dislikes: -1}) {
		t.Errorf("Only = %+v", got)
	}
	if FromSlice(a.Slice()) != a || !(Values{}).IsZero() || a.IsZero() {
		t.Error("Slice/FromSlice/IsZero")
	}
}

func TestCoalesce(t *testing.T) {
	ds := []Delta{
		{"hot", Likes, 1}, {"hot", Likes, 1}, {"hot", Dislikes, 1}, {"hot", Likes, -1},
		{"cold", Views, 1}, {"gone", Likes, 1}, {"gone", Likes, -1},
	}
	want := map[string]Values{"hot": {Likes: 1, Dislikes: 1}, "cold": {Views: 1}}
	if diff := cmp.Diff(want, Coalesce(ds)); diff != "" {
		t.Fatal(diff)
	}
	if diff := cmp.Diff([]Delta{{"hot", Likes, 1}, {"hot", Dislikes, 1}}, Deltas("hot", want["hot"])); diff != "" {
		t.Fatal(diff)
	}
}

func TestDeltaValidate(t *testing.T) {
	if err := (Delta{"a", Likes, 1}).Validate(); err != nil {
		t.Error(err)
	}
	for _, d := range []Delta{{"", Likes, 1}, {"a", "shares", 1}, {"a", Likes, 0}, {"a b", Views, 1}} {
		if d.Validate() == nil {
			t.Errorf("%+v accepted", d)
		}
	}
}

func TestPickShardUniform(t *testing.T) {
	counts := make([]int, 8)
	for i := 0; i < 8000; i++ {
		s := PickShard(8)
		if s < 0 || s >= 8 {
			t.Fatalf("shard %d out of range", s)
		}
		counts[s]++
	}
	for s, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("shard %d drawn %d times of 8000", s, c)
		}
	}
	if PickShard(0) != 0 {
		t.Error("PickShard(0)")
	}
}

func TestShardPolicy(t *testing.T) {
	p := ShardPolicy{WritesPerShard: 10, MinWindow: time.Second}
	cases := []struct {
		current int
		writes  int64
		elapsed time.Duration
		want    int
	}{
		{4, 0, 5 * time.Second, 4},      // idle stays at the minimum
		{4, 200, 5 * time.Second, 4},    // 40/s fits 4 shards
		{4, 201, 5 * time.Second, 8},    // just above
		{4, 3200, 5 * time.Second, 64},  // 640/s: raised at once to 64
		{4, 99999, 5 * time.Second, 64}, // never above 64
		{64, 0, 5 * time.Second, 32},    // falls by half per fold
		{32, 0, 5 * time.Second, 16},
		{8, 0, 5 * time.Second, 4},
		{64, 1500, 5 * time.Second, 32}, // 300/s wants 32
		{64, 100, 0, 32},                // a zero window counts as MinWindow: 100/s wants 16, halved to 32
		{2, 0, time.Second, 4},          // out-of-range current is clamped
		{100, 0, time.Second, 32},
	}
	for _, c := range cases {
		if got := p.Next(c.current, c.writes, c.elapsed); got != c.want {
			t.Errorf("Next(%d, %d, %v) = %d, want %d", c.current, c.writes, c.elapsed, got, c.want)
		}
	}
	for _, rate := range []float64{1, 1e9} {
		if got := (ShardPolicy{}).Want(rate); got != MaxShards {
			t.Errorf("zero policy Want(%v) = %d, want MaxShards", rate, got)
		}
	}
}

func TestCorrection(t *testing.T) {
	fields := []Field{Likes, Dislikes}
	// A right count with events in flight: truth includes them, the counter
	// does not yet, the outbox does. Zero correction.
	truth := Values{Likes: 10, Dislikes: 2}
	counted := Values{Likes: 8, Dislikes: 3, Views: 99}
	pending := Values{Likes: 2, Dislikes: -1}
	if got := Correction(truth, counted, pending, fields); !got.IsZero() {
		t.Errorf("right count corrected by %+v", got)
	}
	// A lost event: the counter misses one like and nothing is pending.
	if got := Correction(truth, Values{Likes: 9, Dislikes: 2}, Values{}, fields); got != (Values{Likes: 1}) {
		t.Errorf("lost event: %+v", got)
	}
	// A duplicated delta: one like too many. Views are not the source's.
	if got := Correction(truth, Values{Likes: 11, Dislikes: 2, Views: 5}, Values{}, fields); got != (Values{Likes: -1}) {
		t.Errorf("duplicate: %+v", got)
	}
}

func TestDeltaValidateBoundsN(t *testing.T) {
	for _, n := range []int64{1, -1, MaxDelta, -MaxDelta} {
		if err := (Delta{Key: "v", Field: Likes, N: n}).Validate(); err != nil {
			t.Errorf("N=%d refused: %v", n, err)
		}
	}
	for _, n := range []int64{0, MaxDelta + 1, -MaxDelta - 1, math.MaxInt64, math.MinInt64} {
		if err := (Delta{Key: "v", Field: Likes, N: n}).Validate(); err == nil {
			t.Errorf("N=%d accepted", n)
		}
	}
}
