package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/oauth2"

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
		err := run(ctx, store, "ops@example.com", args, &out)
		return out.String(), err
	}
	if err := store.Admit(ctx, "mallory"); err != nil {
		t.Fatalf("before: %v", err)
	}
	if out, err := cmd("revoke", "-reason", "token leaked", "mallory"); err != nil || out != "mallory: revoked\n" {
		t.Fatalf("revoke: %q %v", out, err)
	}
	if err := store.Admit(ctx, "mallory"); !errors.Is(err, moderation.ErrRevoked) {
		t.Fatalf("the call after the revocation: %v, want ErrRevoked", err)
	}
	if out, err := cmd("revoke", "mallory"); err != nil || out != "mallory: already revoked\n" {
		t.Fatalf("revoke again: %q %v", out, err)
	}
	if out, err := cmd("list"); err != nil || !strings.HasPrefix(out, "mallory\trevoked ") || !strings.Contains(out, "by ops@example.com") {
		t.Fatalf("list: %q %v", out, err)
	}
	if out, err := cmd("restore", "-reason", "new device", "mallory"); err != nil || out != "mallory: restored\n" {
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
	for _, e := range es {
		if e.Actor != "ops@example.com" || e.ActorKind != moderation.ActorOperator {
			t.Errorf("entry %+v: want the authenticated operator as its actor", e)
		}
	}
	// No name can be typed in place of the authenticated one.
	for _, bad := range [][]string{{}, {"revoke"}, {"revoke", "-by", "someone-else", "mallory"}, {"restore", "a", "b"}, {"list", "x"}, {"grant", "x"}} {
		if _, err := cmd(bad...); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("%q: %v, want the usage", bad, err)
		}
	}
}

// TestOperatorIsTheTokensAccount: outside the emulator the operator is the
// account tokeninfo names for the credentials' access token, and a token
// that names no verified address is refused.
func TestOperatorIsTheTokensAccount(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("access_token") {
		case "alice-token":
			fmt.Fprint(w, `{"email":"alice@example.com","email_verified":"true","scope":"openid"}`)
		case "unverified":
			fmt.Fprint(w, `{"email":"bob@example.com","email_verified":"false"}`)
		case "no-email":
			fmt.Fprint(w, `{"scope":"https://www.googleapis.com/auth/cloud-platform"}`)
		default:
			http.Error(w, `{"error":"invalid_token"}`, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	email := func(tok string) (string, error) {
		return tokenEmail(context.Background(), srv.Client(), srv.URL, oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok}))
	}
	if got, err := email("alice-token"); err != nil || got != "alice@example.com" {
		t.Errorf("alice's token: %q %v", got, err)
	}
	for _, tok := range []string{"unverified", "no-email", "forged"} {
		if got, err := email(tok); err == nil {
			t.Errorf("%s: acts as %q, want an error", tok, got)
		}
	}
	// Against the emulator: the documented stand-in.
	cfg := emulatortest.New(t)
	if got, err := operator(context.Background(), cfg); err != nil || !strings.HasPrefix(got, "local:") {
		t.Errorf("against the emulator: %q %v, want local:<user>", got, err)
	}
}
