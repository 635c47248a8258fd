package moderation

import (
	"fmt"
	"time"
)

// Layout is how a detection step is cut: its partitions (ranges of the
// item parts) and the buckets of partitions its merge is cut by.
type Layout struct{ Partitions, Buckets int }

func (l Layout) String() string { return fmt.Sprintf("%d/%d", l.Partitions, l.Buckets) }

// LegacyLayout cut every step before the layout was recorded.
var LegacyLayout = Layout{Partitions: 16, Buckets: 4}

// Layouts is the record of the detection's layout: the steps that start at
// or after Since are cut by Current, the earlier ones by Previous. A change
// of layout sets Since past every step the current layout's partitions have
// begun, so a step begun under one layout is finished under it.
type Layouts struct {
	Since             time.Time
	Current, Previous Layout
}

// At is the layout of the step that starts at start.
func (ls Layouts) At(start time.Time) Layout {
	if start.Before(ls.Since) {
		return ls.Previous
	}
	return ls.Current
}

// Encode is the record's text (the watermark row's Cursor), Since aside:
// "<partitions>/<buckets> <previous partitions>/<previous buckets>".
func (ls Layouts) Encode() string { return ls.Current.String() + " " + ls.Previous.String() }

// DecodeLayouts reads what Encode wrote, with since.
func DecodeLayouts(s string, since time.Time) (Layouts, error) {
	ls := Layouts{Since: since}
	if _, err := fmt.Sscanf(s, "%d/%d %d/%d", &ls.Current.Partitions, &ls.Current.Buckets, &ls.Previous.Partitions, &ls.Previous.Buckets); err != nil {
		return Layouts{}, fmt.Errorf("detection layout %q: %w", s, err)
	}
	for _, l := range []Layout{ls.Current, ls.Previous} {
		if l.Partitions < 1 || l.Partitions > Parts || l.Buckets < 1 || l.Buckets > l.Partitions {
			return Layouts{}, fmt.Errorf("detection layout %q: %v is not 1 ≤ buckets ≤ partitions ≤ %d", s, l, Parts)
		}
	}
	return ls, nil
}

// InPlay are the layouts whose partitions may still have steps to store:
// the current one, and the previous one while it differs in partitions.
func (ls Layouts) InPlay() []Layout {
	if ls.Previous.Partitions != ls.Current.Partitions {
		return []Layout{ls.Current, ls.Previous}
	}
	return []Layout{ls.Current}
}
