package moderation

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestViewVelocityJudge(t *testing.T) {
	h := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	counts := []AccountViews{
		{UserID: "human", Hour: h, Views: 600}, // at the limit: not flagged
		{UserID: "bot", Hour: h, Views: 601},
		{UserID: "bot", Hour: h.Add(time.Hour), Views: 900}, // its busiest hour is the evidence
		{UserID: "bot", Hour: h.Add(2 * time.Hour), Views: 700},
		{UserID: "another", Hour: h, Views: 7200},
	}
	got := ViewVelocity{MaxPerHour: 600}.Judge(counts)
	want := []Group{
		{Members: []string{"another"}, Evidence: Evidence{Items: []Item{}, WindowStart: h, WindowEnd: h.Add(time.Hour), GroupSize: 1, Views: 7200}},
		{Members: []string{"bot"}, Evidence: Evidence{Items: []Item{}, WindowStart: h.Add(time.Hour), WindowEnd: h.Add(2 * time.Hour), GroupSize: 1, Views: 900}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Judge (-want +got):\n%s", diff)
	}
	if got := (ViewVelocity{}).Judge(counts); len(got) != 0 {
		t.Errorf("the check off flags %v", got)
	}
	// The evidence is stored and listed as JSON: items an empty list.
	if s := want[0].Evidence.Encode(); s != `{"items":[],"windowStart":"2026-03-04T10:00:00Z","windowEnd":"2026-03-04T11:00:00Z","groupSize":1,"youngAccounts":0,"views":7200}` {
		t.Errorf("encoded evidence %s", s)
	}
}
