package moderation

import (
	"slices"
	"strings"
	"time"
)

// ViewVelocity judges how fast an account records views. A view counts once
// per user, video and viewing window, so an account can only farm views by
// spreading them over many videos; doing so faster than a person can watch
// is the signal. MaxPerHour is above what a person does: a full hour of
// fifteen-second clips, back to back, is 240 views, and the default, 600, is
// one view every six seconds for a whole clock hour, well below the 7,200 an
// hour the history write limit lets a client post. Such an account is
// flagged automatically, as a coordinated group is: the rate itself is the
// evidence, and a moderator can unflag it.
type ViewVelocity struct {
	// MaxPerHour is the most views an account is counted in one clock hour
	// without being flagged; 0 turns the check off.
	MaxPerHour int64
}

// AccountViews is one account's views counted in one clock hour.
type AccountViews struct {
	UserID string
	Hour   time.Time // start of the clock hour
	Views  int64
}

// Judge returns the groups of one account each to flag among counts: the
// accounts counted more than MaxPerHour views in an hour, with evidence of
// their busiest hour, sorted by user id.
func (v ViewVelocity) Judge(counts []AccountViews) []Group {
	if v.MaxPerHour <= 0 {
		return nil
	}
	worst := map[string]AccountViews{}
	for _, c := range counts {
		if c.Views <= v.MaxPerHour {
			continue
		}
		if w, ok := worst[c.UserID]; !ok || c.Views > w.Views {
			worst[c.UserID] = c
		}
	}
	out := make([]Group, 0, len(worst))
	for u, c := range worst {
		out = append(out, Group{Members: []string{u}, Evidence: Evidence{
			Items:       []Item{},
			WindowStart: c.Hour.UTC(),
			WindowEnd:   c.Hour.UTC().Add(time.Hour),
			GroupSize:   1,
			Views:       c.Views,
		}})
	}
	slices.SortFunc(out, func(a, b Group) int { return strings.Compare(a.Members[0], b.Members[0]) })
	return out
}
