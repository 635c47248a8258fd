// Command moderators revokes and restores moderators' roles in the
// server-side list every moderation call checks (shared/moderation): a
// revocation refuses the moderator's next call, whatever their token says,
// and each change is written to the moderation audit trail. It reads the
// database from the environment the functions read (GOOGLE_CLOUD_PROJECT,
// SPANNER_INSTANCE, SPANNER_DATABASE, SPANNER_EMULATOR_HOST) and runs with
// the operator's credentials (docs/moderation.md): the audit trail names the
// account of those credentials as the actor, not a name the operator types.
//
// Usage:
//
//	moderators revoke  [-reason TEXT] USER_ID
//	moderators restore [-reason TEXT] USER_ID
//	moderators list
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/moderation"
	"github.com/videngage/engagement/shared/moderation/moderationstore"
	"github.com/videngage/engagement/shared/spannerdb"
)

func main() {
	cmdmain.Run("moderators", func(ctx context.Context) error { return realMain(ctx, os.Args[1:], os.Stdout) })
}

const usage = `usage:
  moderators revoke  [-reason TEXT] USER_ID
  moderators restore [-reason TEXT] USER_ID
  moderators list`

// Store is what the command changes: the list of revoked moderators.
type Store interface {
	Revoke(ctx context.Context, userID, by, reason string) (bool, error)
	Restore(ctx context.Context, userID, by, reason string) (bool, error)
	Revocations(ctx context.Context) ([]moderationstore.Revocation, error)
}

func realMain(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	db, err := spannerdb.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Client.Close()
	by, err := operator(ctx, cfg)
	if err != nil {
		return fmt.Errorf("who is acting: %w", err)
	}
	return run(ctx, moderationstore.New(db, moderationstore.Gate{}), by, args, out)
}

// run carries out one command on store as the operator by.
func run(ctx context.Context, store Store, by string, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch cmd := args[0]; cmd {
	case "list":
		if len(args) != 1 {
			return errors.New(usage)
		}
		revs, err := store.Revocations(ctx)
		if err != nil {
			return err
		}
		for _, r := range revs {
			fmt.Fprintf(out, "%s\trevoked %s by %s\t%s\n", r.UserID, r.Time.UTC().Format(time.RFC3339), r.RevokedBy, r.Reason)
		}
		return nil
	case "revoke", "restore":
		fl := flag.NewFlagSet(cmd, flag.ContinueOnError)
		fl.SetOutput(io.Discard)
		reason := fl.String("reason", "", "why, recorded in the audit trail")
		if err := fl.Parse(args[1:]); err != nil || fl.NArg() != 1 || fl.Arg(0) == "" {
			return errors.New(usage)
		}
		if err := moderation.ValidReason(*reason); err != nil {
			return err
		}
		user := fl.Arg(0)
		change, done := store.Revoke, "revoked"
		if cmd == "restore" {
			change, done = store.Restore, "restored"
		}
		changed, err := change(ctx, user, by, *reason)
		if err != nil {
			return err
		}
		if !changed {
			done = "already " + done
		}
		fmt.Fprintf(out, "%s: %s\n", user, done)
		return nil
	}
	return errors.New(usage)
}
