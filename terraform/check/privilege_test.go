package check

import (
	"errors"
	"fmt"
	"testing"
)

// Each function identity holds exactly the Bigtable tables its code touches
// and the one Firestore database, in every environment.
func TestPrivilegeRule(t *testing.T) {
	res, errs := envResults(t)
	code := loadCode(t)
	touches, err := BigtableTablesOf(repo, code)
	if err != nil {
		t.Fatal(err)
	}
	// The derivation itself: Reactions counts its limit in rate_limits and
	// touches no history; ApplyHistory writes history and no limit.
	if got := fmt.Sprint(sortedSet(touches["Reactions"])); got != "[rate_limits]" {
		t.Errorf("Reactions touches %s, want [rate_limits]", got)
	}
	if got := fmt.Sprint(sortedSet(touches["ApplyHistory"])); got != "[watch_history watch_latest]" {
		t.Errorf("ApplyHistory touches %s, want [watch_history watch_latest]", got)
	}
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for fn, tables := range touches {
				t.Logf("%s: Bigtable tables %v", fn, sortedSet(tables))
			}
			for _, e := range PrivilegeRule(res[env].PlanJSON, code, touches) {
				t.Error(e)
			}
		})
	}
}

// A copy that grants Reactions a history table and every function every
// Firestore database fails the rule.
func TestPrivilegeRuleFailsWhenBroken(t *testing.T) {
	needToolchain(t)
	code := loadCode(t)
	touches, err := BigtableTablesOf(repo, code)
	if err != nil {
		t.Fatal(err)
	}
	root := copyOf(t, func(root string) {
		replaceIn(t, "iam.tf", `publish = [local.counter_topic], tables = [local.bt["rate_limits"]] }`, `publish = [local.counter_topic], tables = [local.bt["rate_limits"], local.bt["watch_history"]] }`)(root)
		replaceIn(t, "iam.tf", "  condition {\n    title       = \"engagement-database\"\n    description = \"Only the engagement Firestore database.\"\n    expression  = \"resource.name == \\\"projects/${var.project_id}/databases/${google_firestore_database.main.name}\\\"\"\n  }\n", "")(root)
	})
	r, err := toolchain.CheckEnvironment(root, "dev")
	if err != nil {
		t.Fatalf("the broken copy must still plan (only the rule may catch it): %v", err)
	}
	got := PrivilegeRule(r.PlanJSON, code, touches)
	for _, want := range []string{
		"privilege rule: function Reactions is granted Bigtable table watch_history, which its code (github.com/videngage/engagement/functions/reactions and its imports) does not touch",
		"privilege rule: function History holds roles/datastore.user on every Firestore database of the project",
	} {
		if !containsErr(got, want) {
			t.Errorf("the privilege rule did not report %q; it said: %v", want, errors.Join(got...))
		} else {
			t.Logf("fails as it must: %s", want)
		}
	}
}

// Every store that holds users' data records its writes, in every
// environment; a copy that stops recording Spanner's fails the rule.
func TestAuditLogRule(t *testing.T) {
	res, errs := envResults(t)
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for _, e := range AuditLogRule(res[env].PlanJSON) {
				t.Error(e)
			}
		})
	}
	needToolchain(t)
	root := copyOf(t, replaceIn(t, "audit.tf", `"spanner.googleapis.com"   = ["DATA_READ", "DATA_WRITE"]`, `"spanner.googleapis.com"   = ["DATA_READ"]`))
	r, err := toolchain.CheckEnvironment(root, "dev")
	if err != nil {
		t.Fatalf("the broken copy must still plan (only the rule may catch it): %v", err)
	}
	want := "audit log rule: writes through spanner.googleapis.com are not recorded (no Data Access audit config with DATA_WRITE)"
	if got := AuditLogRule(r.PlanJSON); !containsErr(got, want) {
		t.Errorf("the audit log rule did not report %q; it said: %v", want, errors.Join(got...))
	}
}
