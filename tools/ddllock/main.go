// Command ddllock keeps shared/topology/ddl/ddl.lock, the append-only lock of
// the applied Spanner DDL (package topology's Lock).
//
//	go run ./tools/ddllock            append the statements of new DDL files
//	go run ./tools/ddllock -check     only verify the lock (what the tests do)
//	go run ./tools/ddllock -tfvars    print {"spanner_ddl": [...]}: the
//	                                  locked DDL, for planning an older
//	                                  commit's code (docs/operations.md)
//
// It never rewrites a locked entry: when an applied statement was edited,
// removed or had a statement inserted before it, it fails and says which.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/videngage/engagement/shared/topology"
)

func main() {
	if err := realMain(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ddllock:", err)
		os.Exit(1)
	}
}

func realMain(args []string, stdout io.Writer) error {
	fl := flag.NewFlagSet("ddllock", flag.ContinueOnError)
	dir := fl.String("dir", filepath.Join("shared", "topology", "ddl"), "directory of the DDL files and "+topology.LockFile)
	check := fl.Bool("check", false, "verify the lock, change nothing")
	tfvars := fl.Bool("tfvars", false, "print the locked DDL as a Terraform variables file (JSON)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	fsys := os.DirFS(*dir)
	if *tfvars {
		stmts, err := topology.LockedDDL(fsys)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string][]string{"spanner_ddl": stmts})
	}
	stmts, err := topology.ReadDDL(fsys)
	if err != nil {
		return err
	}
	lockPath := filepath.Join(*dir, topology.LockFile)
	lock := &topology.Lock{}
	if b, err := os.ReadFile(lockPath); err == nil {
		if lock, err = topology.ParseLock(b); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) || *check {
		return err
	}
	if *check {
		return lock.Check(stmts)
	}
	next, err := lock.Append(stmts)
	if err != nil {
		return err
	}
	added := len(next.Entries) - len(lock.Entries)
	if added == 0 {
		fmt.Fprintf(stdout, "%s: up to date (%d statements)\n", lockPath, len(next.Entries))
		return nil
	}
	if err := os.WriteFile(lockPath, next.Format(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: appended %d statements (%d in all)\n", lockPath, added, len(next.Entries))
	return nil
}
