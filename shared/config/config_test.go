package config

import (
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
)

func TestDefaults(t *testing.T) {
	c, err := FromLookuper(t.Context(), envconfig.MapLookuper(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.HTTP.RateLimits {
		t.Errorf("defaults: RateLimits %v", c.HTTP.RateLimits)
	}
	if got, want := c.UserLimits(), (UserLimits{Reactions: 60, Comments: 10, YoungComments: 3, YoungReactions: 10, History: 120, OtherWrites: 30, Moderation: 30, ExportsPerDay: 3}); got != want {
		t.Errorf("UserLimits() = %+v, want %+v", got, want)
	}
	if c.Moderation.UnflagProtection != 30*24*time.Hour {
		t.Errorf("UnflagProtection %v, want 720h", c.Moderation.UnflagProtection)
	}
}

func TestTypedValues(t *testing.T) {
	c, err := FromLookuper(t.Context(), envconfig.MapLookuper(map[string]string{
		"RATE_LIMITS": "off",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.RateLimits {
		t.Errorf("RATE_LIMITS=off: RateLimits %v", c.HTTP.RateLimits)
	}
	if got := c.UserLimits(); got != (UserLimits{}) {
		t.Errorf("RATE_LIMITS=off: UserLimits() = %+v, want none", got)
	}
}

func TestNegativeLimitIsNone(t *testing.T) {
	c, err := FromLookuper(t.Context(), envconfig.MapLookuper(map[string]string{"RATE_LIMIT_HISTORY": "-1"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.UserLimits().History; got != 0 {
		t.Errorf("RATE_LIMIT_HISTORY=-1: %d, want 0 (no limit)", got)
	}
}

func TestBadValuesFailTheLoad(t *testing.T) {
	for _, env := range []map[string]string{
		{"RATE_LIMITS": "maybe"},
		{"RATE_LIMITS": "true"},
	} {
		if _, err := FromLookuper(t.Context(), envconfig.MapLookuper(env)); err == nil {
			t.Errorf("%v accepted", env)
		}
	}
}

// TestDefaultsAreTheTags: Defaults is what an empty environment loads.
func TestDefaultsAreTheTags(t *testing.T) {
	c, err := FromLookuper(t.Context(), envconfig.MapLookuper(nil))
	if err != nil {
		t.Fatal(err)
	}
	d := Defaults()
	if d.Counters != c.Counters || d.History != c.History || d.Moderation != c.Moderation || d.Auth.TokenCache != c.Auth.TokenCache || d.HTTP.CountsCacheEntries != c.HTTP.CountsCacheEntries {
		t.Errorf("Defaults() = %+v, want %+v", d, *c)
	}
	if d.Counters.RollupInterval != 5*time.Second || d.Auth.TokenCache != 10000 {
		t.Errorf("Defaults(): rollup interval %v, token cache %d", d.Counters.RollupInterval, d.Auth.TokenCache)
	}
}
