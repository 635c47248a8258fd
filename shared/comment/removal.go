package comment

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/videngage/engagement/shared/counter"
	"github.com/videngage/engagement/shared/events"
)

// Transition is the status a comment in status from takes when a delete
// (to = Deleted) or a spam verdict (to = Spam) reaches it, and whether that
// changes it. A comment leaves visible once and never comes back; a spam
// verdict is recorded on a deleted comment too (the moderation record), and
// an author's delete does not overwrite a spam verdict.
func Transition(from, to Status) (next Status, changed bool, err error) {
	switch to {
	case Deleted, Spam:
	default:
		return from, false, fmt.Errorf("comment: no transition to %q", to)
	}
	switch {
	case from == to:
		return from, false, nil
	case from == Visible:
		return to, true, nil
	case from == Deleted && to == Spam:
		return Spam, true, nil
	}
	return from, false, nil
}

// Removal is what a removal transaction read: the comments it names and the
// state around them, all at the transaction's timestamp.
type Removal struct {
	// To is Deleted or Spam.
	To Status
	// Targets are the named comments that exist (each once).
	Targets []Comment
	// ParentStatus holds the stored status of the parent of every reply
	// among Targets (a parent that does not exist is left out).
	ParentStatus map[string]Status
	// VisibleReplies holds, for every visible top-level comment among
	// Targets, how many of its replies are visible (missing means none).
	VisibleReplies map[string]int64
}

// Plan is what a removal writes.
type Plan struct {
	// Changed are the targets whose status changes, carrying the new status.
	Changed []Comment
	// LeftVisible are the ids of the targets that were visible, sorted.
	LeftVisible []string
	// Deltas are the counter changes, summed per counter: one per counter
	// touched, however many comments of the batch touch it.
	Deltas map[string]counter.Values
}

// PlanRemoval applies the counting rule to a removal. A target counts (and
// so leaves the counts) when it is visible and, for a reply, its parent is
// visible too. A visible top-level comment takes its visible replies with it:
// its video loses 1 + replies comments and one thread, and its own replies
// counter drops by replies.
// A visible reply of a visible parent that is removed in the same batch is
// already in its parent's replies, so it adds nothing of its own. A target
// that is already deleted or spam changes no count, whatever the batch.
func PlanRemoval(r Removal) (Plan, error) {
	p := Plan{Deltas: map[string]counter.Values{}}
	leaving := map[string]bool{}
	for _, c := range r.Targets {
		if c.Status == Visible && !c.IsReply() {
			leaving[c.ID] = true
		}
	}
	seen := map[string]bool{}
	add := func(key string, f counter.Field, n int64) {
		if n == 0 {
			return
		}
		v := p.Deltas[key]
		v.Add(f, n)
		p.Deltas[key] = v
	}
	for _, c := range r.Targets {
		if seen[c.ID] {
			return Plan{}, fmt.Errorf("comment: %s named twice in one removal", c.ID)
		}
		seen[c.ID] = true
		next, changed, err := Transition(c.Status, r.To)
		if err != nil {
			return Plan{}, err
		}
		if !changed {
			continue
		}
		wasVisible := c.Status == Visible
		c.Status = next
		p.Changed = append(p.Changed, c)
		if !wasVisible {
			continue
		}
		p.LeftVisible = append(p.LeftVisible, c.ID)
		if !c.IsReply() {
			n := r.VisibleReplies[c.ID]
			if n < 0 {
				return Plan{}, fmt.Errorf("comment: %d visible replies of %s", n, c.ID)
			}
			add(c.VideoID, counter.Comments, -(1 + n))
			add(c.VideoID, counter.Threads, -1)
			add(c.ID, counter.Replies, -n)
			continue
		}
		if r.ParentStatus[c.ParentID] != Visible || leaving[c.ParentID] {
			// Out of the counts already, or taken out with its parent.
			continue
		}
		add(c.VideoID, counter.Comments, -1)
		add(c.ParentID, counter.Replies, -1)
	}
	sort.Strings(p.LeftVisible)
	return p, nil
}

// Events packs the plan's deltas into outbox events of at most
// events.MaxDeltas deltas each. Their ids derive from the comments that left
// visible: a comment leaves visible once, so no two removals share an id, and
// the same removal always has the same ids.
func (p Plan) Events(now time.Time) []events.Event {
	keys := make([]string, 0, len(p.Deltas))
	for k := range p.Deltas {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ds []counter.Delta
	for _, k := range keys {
		ds = append(ds, counter.Deltas(k, p.Deltas[k])...)
	}
	var out []events.Event
	for i := 0; len(ds) > 0; i++ {
		n := min(len(ds), events.MaxDeltas)
		parts := append([]string{strconv.Itoa(i)}, p.LeftVisible...)
		out = append(out, events.Event{
			ID:     events.ID("crm", parts...),
			Kind:   events.KindCounterDelta,
			Outbox: true,
			Deltas: ds[:n:n],
			Time:   now,
		})
		ds = ds[n:]
	}
	return out
}
