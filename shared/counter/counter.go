// Package counter is the pure logic of the sharded counter engine: counter
// keys and fields, the values a counter holds, coalescing of deltas, the
// choice of shard and of the shard count from the measured write rate, and
// the arithmetic of reconciliation. No I/O here; the stores below keep the
// counters in Spanner: outboxstore (the outbox and its consumer), countstore
// (the reads), foldstore (the rollup's fold), reconcilestore (reconciliation)
// and leasestore (the jobs' leases).
package counter

import (
	"fmt"
	"math/rand/v2"
)

// Field is one counted quantity of a counter.
type Field string

// The counted fields. Likes and dislikes count reactions, comments and replies
// count visible comments (videos) and direct replies (comments), threads
// count visible top-level comments (videos), views count recorded watches.
const (
	Likes    Field = "likes"
	Dislikes Field = "dislikes"
	Comments Field = "comments"
	Replies  Field = "replies"
	Views    Field = "views"
	Threads  Field = "threads"
)

// Fields lists every field in the order of Slice (and Columns). A field added
// later goes last, so that values stored as a slice before it existed read
// back with it zero.
var Fields = []Field{Likes, Dislikes, Comments, Replies, Views, Threads}

// ParseField returns the field named s.
func ParseField(s string) (Field, error) {
	for _, f := range Fields {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("counter: unknown field %q", s)
}

// Column is the Spanner column of the field.
func (f Field) Column() string {
	switch f {
	case Likes:
		return "Likes"
	case Dislikes:
		return "Dislikes"
	case Comments:
		return "Comments"
	case Replies:
		return "Replies"
	case Views:
		return "Views"
	case Threads:
		return "Threads"
	}
	panic("counter: unknown field " + string(f))
}

// Columns are the Spanner columns of Fields, in the same order.
var Columns = []string{"Likes", "Dislikes", "Comments", "Replies", "Views", "Threads"}

// MaxKeyLength is the longest counter key (a content id).
const MaxKeyLength = 64

// ValidKey reports whether s can be a counter key: counter keys are content
// ids (videos and comments), ^[A-Za-z0-9_-]{1,64}$.
func ValidKey(s string) bool {
	if len(s) < 1 || len(s) > MaxKeyLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Values are the fields of one counter (or one shard, or one delta).
type Values struct {
	Likes    int64 `json:"likes"`
	Dislikes int64 `json:"dislikes"`
	Comments int64 `json:"comments"`
	Threads  int64 `json:"threads"`
	Replies  int64 `json:"replies"`
	Views    int64 `json:"views"`
	// UniqueViewers is not a counted field: no delta carries it. A read
	// sets it from the counter's merged unique-viewers sketches (see
	// Viewers); sums and differences carry it along.
	UniqueViewers int64 `json:"uniqueViewers"`
}

func (v *Values) ptr(f Field) *int64 {
	switch f {
	case Likes:
		return &v.Likes
	case Dislikes:
		return &v.Dislikes
	case Comments:
		return &v.Comments
	case Replies:
		return &v.Replies
	case Views:
		return &v.Views
	case Threads:
		return &v.Threads
	}
	panic("counter: unknown field " + string(f))
}

// Get returns the field's value.
func (v Values) Get(f Field) int64 { return *v.ptr(f) }

// Set sets the field's value.
func (v *Values) Set(f Field, n int64) { *v.ptr(f) = n }

// Add adds n to the field.
func (v *Values) Add(f Field, n int64) { *v.ptr(f) += n }

// Plus returns v + o, field by field.
func (v Values) Plus(o Values) Values {
	return Values{Likes: v.Likes + o.Likes, Dislikes: v.Dislikes + o.Dislikes, Comments: v.Comments + o.Comments, Threads: v.Threads + o.Threads,
		Replies: v.Replies + o.Replies, Views: v.Views + o.Views, UniqueViewers: v.UniqueViewers + o.UniqueViewers}
}

// Minus returns v − o, field by field.
func (v Values) Minus(o Values) Values {
	return Values{Likes: v.Likes - o.Likes, Dislikes: v.Dislikes - o.Dislikes, Comments: v.Comments - o.Comments, Threads: v.Threads - o.Threads,
		Replies: v.Replies - o.Replies, Views: v.Views - o.Views, UniqueViewers: v.UniqueViewers - o.UniqueViewers}
}

// IsZero reports whether every field is zero.
func (v Values) IsZero() bool { return v == Values{} }

// Clamped returns v with negative fields raised to zero. A counter can be
// transiently negative (an undo applied before the change it undoes); a
// count shown to anyone never is.
func (v Values) Clamped() Values {
	for _, f := range Fields {
		if v.Get(f) < 0 {
			v.Set(f, 0)
		}
	}
	return v
}

// Only returns v with every field outside fields set to zero.
func (v Values) Only(fields []Field) Values {
	var out Values
	for _, f := range fields {
		out.Set(f, v.Get(f))
	}
	return out
}

// Slice returns the fields in the order of Fields (and Columns).
func (v Values) Slice() []int64 {
	return []int64{v.Likes, v.Dislikes, v.Comments, v.Replies, v.Views, v.Threads}
}

// FromSlice is the inverse of Slice; fields past the end of s are zero.
func FromSlice(s []int64) Values {
	var v Values
	for i, f := range Fields {
		if i < len(s) {
			v.Set(f, s[i])
		}
	}
	return v
}

// Delta is a change of one field of one counter.
type Delta struct {
	Key   string `json:"key"`
	Field Field  `json:"field"`
	N     int64  `json:"n"`
}

// Validate reports a delta that can never be applied.
// MaxDelta bounds one delta: far above any real batch, and low enough that
// the sum of every delta of the largest message (events.MaxEvents ×
// events.MaxDeltas) cannot overflow an int64.
const MaxDelta = 1 << 40

func (d Delta) Validate() error {
	switch {
	case !ValidKey(d.Key):
		return fmt.Errorf("counter: bad counter key %q", d.Key)
	case d.N == 0:
		return fmt.Errorf("counter: zero delta on %s", d.Key)
	case d.N > MaxDelta || d.N < -MaxDelta:
		return fmt.Errorf("counter: delta %d on %s is out of range", d.N, d.Key)
	}
	if _, err := ParseField(string(d.Field)); err != nil {
		return err
	}
	return nil
}

// Coalesce sums deltas per counter key; counters whose sum is zero in every
// field are left out. Many reactions on one hot item become one write.
func Coalesce(ds []Delta) map[string]Values {
	out := make(map[string]Values)
	for _, d := range ds {
		v := out[d.Key]
		v.Add(d.Field, d.N)
		out[d.Key] = v
	}
	for k, v := range out {
		if v.IsZero() {
			delete(out, k)
		}
	}
	return out
}

// Deltas is the inverse of Coalesce for one counter: one delta per non-zero
// field, in the order of Fields.
func Deltas(key string, v Values) []Delta {
	var ds []Delta
	for _, f := range Fields {
		if n := v.Get(f); n != 0 {
			ds = append(ds, Delta{Key: key, Field: f, N: n})
		}
	}
	return ds
}

// PickShard draws the shard a write goes to, uniformly in [0, n). Spreading
// the writes of a hot counter over n rows divides the lock contention on each
// by n.
func PickShard(n int) int {
	if n < 1 {
		n = 1
	}
	return rand.IntN(n)
}
