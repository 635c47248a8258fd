package reaction

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/shared/counter"
)

func gen() int64 { return 42 }

func TestApplyEveryTransition(t *testing.T) {
	kinds := []Kind{None, Like, Dislike}
	states := map[Kind]State{
		None:    {},
		Like:    {Reaction: Like, Version: 3, Generation: 7},
		Dislike: {Reaction: Dislike, Version: 5, Generation: 9},
	}
	for _, from := range kinds {
		for _, to := range kinds {
			cur := states[from]
			tr, err := Apply("u", "v1", cur, to, nil, gen)
			if err != nil {
				t.Fatalf("%s→%s: %v", from, to, err)
			}
			if tr.From != from || tr.To != to {
				t.Errorf("%s→%s: got %s→%s", from, to, tr.From, tr.To)
			}
			// The counts move by exactly the difference of the two states.
			want := counter.Values{}
			if from == Like {
				want.Likes--
			}
			if from == Dislike {
				want.Dislikes--
			}
			if to == Like {
				want.Likes++
			}
			if to == Dislike {
				want.Dislikes++
			}
			got := counter.Coalesce(tr.Deltas)["v1"]
			if got != want {
				t.Errorf("%s→%s: deltas %+v, want %+v", from, to, got, want)
			}
			if from == to {
				if tr.Changed || tr.EventID != "" || tr.Next != cur && !(from == None && tr.Next.Current() == None) {
					t.Errorf("%s→%s: a no-op must change nothing: %+v", from, to, tr)
				}
				continue
			}
			if !tr.Changed || tr.EventID == "" {
				t.Errorf("%s→%s: want a change with an event id", from, to)
			}
			switch {
			case to == None:
				if tr.Next.Version != 0 {
					t.Errorf("%s→none: version %d, want 0", from, tr.Next.Version)
				}
				if tr.EventID != EventID("u", "v1", cur.Generation, cur.Version+1) {
					t.Errorf("%s→none: event id not (gen, version+1)", from)
				}
			case from == None:
				if tr.Next != (State{Reaction: to, Version: 1, Generation: 42}) {
					t.Errorf("none→%s: next %+v", to, tr.Next)
				}
			default:
				if tr.Next != (State{Reaction: to, Version: cur.Version + 1, Generation: cur.Generation}) {
					t.Errorf("%s→%s: next %+v", from, to, tr.Next)
				}
			}
		}
	}
}

func TestEventIDsNeverRepeatAcrossUndo(t *testing.T) {
	gens := []int64{1, 2}
	next := func() int64 { g := gens[0]; gens = gens[1:]; return g }
	seen := map[string]bool{}
	var s State
	for _, to := range []Kind{Like, None, Like, Dislike, None} {
		tr, err := Apply("u", "c", s, to, nil, next)
		if err != nil {
			t.Fatal(err)
		}
		if seen[tr.EventID] {
			t.Fatalf("event id %s repeated", tr.EventID)
		}
		seen[tr.EventID] = true
		s = tr.Next
	}
}

func TestEventIDDistinguishesParts(t *testing.T) {
	if EventID("a", "bc", 1, 1) == EventID("ab", "c", 1, 1) {
		t.Fatal("ids of different users/contents collide")
	}
	if EventID("a", "b", 1, 2) == EventID("a", "b", 12, 0) {
		t.Fatal("ids of different generations/versions collide")
	}
	if id := EventID("u", "c", 1, 1); id != EventID("u", "c", 1, 1) || len(id) > 64 {
		t.Fatalf("id %q not deterministic or too long", id)
	}
}

func TestIfMatch(t *testing.T) {
	cur := State{Reaction: Like, Version: 3, Generation: 1}
	v := int64(3)
	if _, err := Apply("u", "c", cur, Dislike, &v, gen); err != nil {
		t.Fatalf("matching version: %v", err)
	}
	v = 2
	_, err := Apply("u", "c", cur, Dislike, &v, gen)
	var mm *ErrVersionMismatch
	if !errors.As(err, &mm) || mm.Current != 3 {
		t.Fatalf("stale version: got %v, want a mismatch at 3", err)
	}
	zero := int64(0)
	if _, err := Apply("u", "c", State{}, Like, &zero, gen); err != nil {
		t.Fatalf("If-Match 0 on none (create only): %v", err)
	}
	if _, err := Apply("u", "c", cur, Like, &zero, gen); err == nil {
		t.Fatal("If-Match 0 on an existing reaction must fail")
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"like", "dislike", "none"} {
		if k, err := Parse(s); err != nil || string(k) != s {
			t.Errorf("Parse(%q) = %q, %v", s, k, err)
		}
	}
	for _, s := range []string{"", "Like", "love", " none"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
}

func TestEvent(t *testing.T) {
	tr, _ := Apply("u", "c", State{}, Like, nil, gen)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	e := tr.Event("u", "c", at)
	if err := e.Validate(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]counter.Delta{{Key: "c", Field: counter.Likes, N: 1}}, e.Deltas); diff != "" {
		t.Fatal(diff)
	}
	if !e.Outbox || e.Reaction.To != "like" || e.Reaction.Version != 1 {
		t.Fatalf("event %+v", e)
	}
}

// TestTagsNeverRepeat: the Tags of a (user, item) across lives of its row
// — changes committed a microsecond or more apart, an undo, a new row
// created after it — never repeat, and the new row's are above the old's,
// while the stored Version restarts at 1. A row older than the CreateTime
// column shows its Version.
func TestTagsNeverRepeat(t *testing.T) {
	seen := map[int64]bool{}
	cur := State{}
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var last int64
	for life := range 3 {
		for _, to := range []Kind{Like, Dislike, Like, Dislike} {
			tr, err := Apply("u", "c", cur, to, nil, gen)
			if err != nil {
				t.Fatal(err)
			}
			cur = tr.Next
			if cur.Created.IsZero() {
				cur.Created = at // the creation's commit timestamp
			}
			tag := cur.Tag()
			if seen[tag] || tag <= last {
				t.Fatalf("life %d: Tag %d after %d (seen %v)", life, tag, last, seen)
			}
			seen[tag], last = true, tag
			at = at.Add(time.Microsecond) // the next change commits later
		}
		tr, err := Apply("u", "c", cur, None, &last, gen)
		if err != nil {
			t.Fatalf("undo with the current Tag: %v", err)
		}
		cur = tr.Next
		if cur.Tag() != 0 {
			t.Fatalf("none shows %d", cur.Tag())
		}
		at = at.Add(time.Microsecond) // the undo's commit
	}
	if got := (State{Reaction: Like, Version: 3}).Tag(); got != 3 {
		t.Errorf("a row without CreateTime shows %d, want its Version 3", got)
	}
	// An If-Match of the first row does not match a later one.
	old := State{Reaction: Like, Version: 1, Created: at.Add(-time.Hour)}.Tag()
	if _, err := Apply("u", "c", State{Reaction: Like, Version: 1, Created: at}, Dislike, &old, gen); err == nil {
		t.Error("an If-Match of an earlier row matched")
	}
}
