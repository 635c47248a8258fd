package reconcilestore_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"

	"cloud.google.com/go/spanner"
	"github.com/google/go-cmp/cmp"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/counter/reconcilestore"
	"github.com/videngage/engagement/shared/events"
)

func TestMain(m *testing.M) { emulatortest.Main(m) }

// source is a source of truth held in memory: the truth of its field for
// each key it lists.
type source struct {
	name  string
	field counter.Field
	truth map[string]int64
	// pages counts KeysAfter calls; longest is the most keys one returned.
	pages, longest int
}

func (s *source) Name() string            { return s.name }
func (s *source) Fields() []counter.Field { return []counter.Field{s.field} }

func (s *source) KeysAfter(_ context.Context, _ *spanner.ReadOnlyTransaction, after string, limit int) ([]string, error) {
	var keys []string
	for k := range s.truth {
		if k > after {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	keys = keys[:min(limit, len(keys))]
	s.pages++
	s.longest = max(s.longest, len(keys))
	return keys, nil
}

func (s *source) Truth(_ context.Context, _ *spanner.ReadOnlyTransaction, keys []string) (map[string]counter.Values, error) {
	out := map[string]counter.Values{}
	for _, k := range keys {
		if n, ok := s.truth[k]; ok {
			out[k] = fieldValues(s.field, n)
		}
	}
	return out, nil
}

func fieldValues(f counter.Field, n int64) counter.Values {
	var v counter.Values
	switch f {
	case counter.Likes:
		v.Likes = n
	case counter.Comments:
		v.Comments = n
	}
	return v
}

// TestReconcileAllPages reconciles every counter a few keys at a time, with
// keys that only the counters, only one source, or several of them know,
// interleaved so that every page boundary falls inside some list: each key
// is checked exactly once and every drift, and only drift, is corrected.
func TestReconcileAllPages(t *testing.T) {
	ctx := context.Background()
	const page = 3
	w := newWorld(t, reconcilestore.Options{ReconcilePage: page})

	likes := &source{name: "likes", field: counter.Likes, truth: map[string]int64{}}
	comments := &source{name: "comments", field: counter.Comments, truth: map[string]int64{}}
	var deltas []counter.Delta
	wantFix := map[string]counter.Values{}
	all := map[string]bool{}
	for i := range 40 {
		k := fmt.Sprintf("k%02d", i)
		// Which lists know k: likes (i%2), comments (i%3), the counters
		// (i%5 != 0); a key in no list is not a key at all.
		inLikes, inComments, counted := i%2 == 0, i%3 == 0, i%5 != 0
		if !inLikes && !inComments && !counted {
			continue
		}
		all[k] = true
		var truth, have counter.Values
		if inLikes {
			likes.truth[k] = int64(i)
			truth.Likes = int64(i)
		}
		if inComments {
			comments.truth[k] = int64(i + 1)
			truth.Comments = int64(i + 1)
		}
		if counted {
			// Every fourth counted key drifts by +2 likes, the others
			// count the truth exactly.
			have = truth
			if i%4 == 1 {
				have.Likes += 2
			}
			if have.IsZero() {
				have.Comments = 1 // a counter with no truth at all
			}
			deltas = append(deltas, counter.Deltas(k, have)...)
		}
		if fix := truth.Minus(have); !fix.IsZero() {
			wantFix[k] = fix
		}
	}
	if _, err := w.Outbox.Apply(ctx, []events.Event{{ID: "seed", Kind: events.KindCounterDelta, Deltas: deltas}}); err != nil {
		t.Fatal(err)
	}

	rep, err := w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{likes, comments})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != len(all) {
		t.Errorf("checked %d counters, want %d (each key once)", rep.Checked, len(all))
	}
	got := map[string]counter.Values{}
	for _, c := range rep.Corrections {
		got[c.Key] = c.Delta
	}
	if diff := cmp.Diff(wantFix, got); diff != "" {
		t.Errorf("corrections (-want +got):\n%s", diff)
	}
	// Listed a page at a time: at least as many pages as the likes alone
	// fill, none longer than a page.
	if likes.pages < len(likes.truth)/page || likes.longest != page {
		t.Errorf("likes (%d keys) listed in %d pages of at most %d keys; want pages of %d", len(likes.truth), likes.pages, likes.longest, page)
	}

	// Corrected, the counters now equal the truth: a second run finds nothing.
	rep, err = w.Recon.Reconcile(ctx, reconcilestore.All, []reconcilestore.Source{likes, comments})
	if err != nil || rep.Corrected != 0 || rep.Checked != len(all) {
		t.Errorf("second run: %+v, %v", rep, err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range all {
			if !yield(k) {
				return
			}
		}
	})
	counted, pending, err := w.Counts.Totals(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		want := counter.Values{Likes: likes.truth[k], Comments: comments.truth[k]}
		if got := counted[k].Plus(pending[k]); got != want {
			t.Errorf("%s: counts %+v after reconciliation, want %+v", k, got, want)
		}
	}
}
