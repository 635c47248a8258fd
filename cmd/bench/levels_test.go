package main

import (
	"math"
	"testing"
	"time"
)

func TestFitGroups(t *testing.T) {
	// CPU = 90 + 4000/G exactly, at four group sizes.
	var rs []levelResult
	for _, g := range []int{30, 60, 120, 250} {
		n := g * 40
		cpu := time.Duration((90+4000/float64(g))*1000) * time.Nanosecond * time.Duration(n)
		rs = append(rs, levelResult{reactions: n, groups: 40, r: result{cost: cost{cpuPerReaction: cpu / time.Duration(n)}}})
	}
	a, b := fitGroups(rs)
	if math.Abs(a-90) > 0.5 || math.Abs(b-4000) > 20 {
		t.Errorf("fit: a = %.2f, b = %.1f; want 90 and 4000", a, b)
	}
	if _, err := parseLevels("64,x"); err == nil {
		t.Error("parseLevels took a level that is no number")
	}
}
