package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/videngage/engagement/internal/emulators/emulatortest"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
)

func TestMain(m *testing.M) {
	flag.Parse()
	emulatortest.Main(m)
}

// TestRevokeTakesEffectOnTheNextCall: the command's revocation refuses the
// moderator's very next call (no cache, no token expiry to wait for), list
// shows it, restore lifts it, and both are in the trail.
func TestRevokeTakesEffectOnTheNextCall(t *testing.T) {
	db := emulatortest.Spanner(t, emulatortest.New(t))
	store := moderationstore.New(db, moderationstore.Gate{})
	ctx := context.Background()
	cmd := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, store, args, &out)
		return out.String(), err
	}
	if err := store.Admit(ctx, "mallory"); err != nil {
		t.Fatalf("before: %v", err)
	}
	if out, err := cmd("revoke", "-by", "ops@example.com", "-reason", "token leaked", "mallory"); err != nil || out != "mallory: revoked\n" {
		t.Fatalf("revoke: %q %v", out, err)
	}
	if err := store.Admit(ctx, "mallory"); !errors.Is(err, moderation.ErrRevoked) {
		t.Fatalf("the call after the revocation: %v, want ErrRevoked", err)
	}
	if out, err := cmd("revoke", "-by", "ops@example.com", "mallory"); err != nil || out != "mallory: already revoked\n" {
		t.Fatalf("revoke again: %q %v", out, err)
	}
	if out, err := cmd("list"); err != nil || !strings.HasPrefix(out, "mallory\trevoked ") || !strings.Contains(out, "by ops@example.com") {
		t.Fatalf("list: %q %v", out, err)
	}
	if out, err := cmd("restore", "-by", "ops@example.com", "-reason", "new device", "mallory"); err != nil || out != "mallory: restored\n" {
		t.Fatalf("restore: %q %v", out, err)
	}
	if err := store.Admit(ctx, "mallory"); err != nil {
		t.Fatalf("after the restoration: %v", err)
	}
	if out, err := cmd("list"); err != nil || out != "" {
		t.Fatalf("list after the restoration: %q %v", out, err)
	}
	es, _, err := store.List(ctx, moderation.Filter{UserID: "mallory"}, nil, 10)
	if err != nil || len(es) != 3 || es[0].Action != moderation.ActionRestore || es[0].Reason != "new device" || es[2].Reason != "token leaked" {
		t.Fatalf("trail: %+v %v", es, err)
	}
	for _, bad := range [][]string{{}, {"revoke", "mallory"}, {"revoke", "-by", "ops"}, {"restore", "-by", "ops", "a", "b"}, {"list", "x"}, {"grant", "x"}} {
		if _, err := cmd(bad...); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%q: %v, want the usage", bad, err)
		}
	}
}
