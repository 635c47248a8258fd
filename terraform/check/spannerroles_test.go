package check

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// spannerTouches derives each function's Spanner tables from the code once.
func spannerTouches(t *testing.T, code *Code) (*Schema, map[string]map[string]Privileges) {
	t.Helper()
	schema, err := ParseSchema(code.DDL)
	if err != nil {
		t.Fatal(err)
	}
	touches, err := SpannerTablesOf(repo, code, schema)
	if err != nil {
		t.Fatal(err)
	}
	return schema, touches
}

func describe(m map[string]Privileges) string {
	var out []string
	for t, a := range m {
		out = append(out, t+":"+a.String())
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

// Each function connects as its own database role, granted exactly the
// tables its code touches, in every environment.
func TestSpannerRoleRule(t *testing.T) {
	res, errs := envResults(t)
	code := loadCode(t)
	schema, touches := spannerTouches(t, code)
	// The derivation itself: Counts only reads, ApplyCounters writes the
	// counters and the outbox, History holds no Spanner table.
	for fn, want := range map[string]string{
		"Counts":         "[CounterShards:SELECT Counters:SELECT PendingDeltas:SELECT Reactions:SELECT]",
		"ResumeErasures": "[AccountErasures:SELECT]",
		"History":        "[]",
	} {
		if got := describe(touches[fn]); got != want {
			t.Errorf("%s touches %s, want %s", fn, got, want)
		}
	}
	for _, tb := range []string{"AppliedEvents", "Counters", "CounterShards", "PendingDeltas"} {
		if touches["ApplyCounters"][tb]&privWrite == 0 {
			t.Errorf("ApplyCounters does not write %s: %s", tb, describe(touches["ApplyCounters"]))
		}
	}
	// The audit trail, privilege by privilege: Moderation lists it and
	// appends to it, the detectors and the comment removal only append,
	// the export only reads (through a variable holding the table).
	for fn, want := range map[string]Privileges{
		"Moderation":         PrivSelect | PrivInsert,
		"ApplyViews":         PrivInsert,
		"DetectManipulation": PrivInsert,
		"Comments":           PrivInsert,
		"EraseAccount":       PrivInsert,
		"Account":            PrivSelect,
		"PrepareExport":      PrivSelect,
	} {
		if got := touches[fn]["ModerationLog"]; got != want {
			t.Errorf("%s uses %s on ModerationLog, want %s", fn, got, want)
		}
	}
	for _, env := range Environments {
		t.Run(env, func(t *testing.T) {
			if err := errs[env]; err != nil {
				t.Fatal(err)
			}
			for _, fn := range sortedKeys(touches) {
				t.Logf("%s: Spanner tables %s", fn, describe(touches[fn]))
			}
			for _, e := range SpannerRoleRule(res[env].PlanJSON, code, schema, touches) {
				t.Error(e)
			}
		})
	}
}

// A DDL with an extra table privilege or an extra table fails the rule, and
// so does one whose grant a function needs was revoked.
func TestSpannerRoleRuleFailsOnExtraGrants(t *testing.T) {
	res, errs := envResults(t)
	if err := errs["dev"]; err != nil {
		t.Fatal(err)
	}
	code := loadCode(t)
	_, touches := spannerTouches(t, code)
	for _, tc := range []struct {
		stmt, want string
	}{
		{"GRANT INSERT ON TABLE Counters TO ROLE fn_counts",
			"spanner role rule: function Counts's database role fn_counts is granted INSERT on table Counters, which its code (github.com/videngage/engagement/functions/counts and what it links) does not need"},
		{"GRANT SELECT ON TABLE Comments TO ROLE fn_counts",
			"spanner role rule: function Counts's database role fn_counts is granted SELECT on table Comments"},
		{"REVOKE DELETE ON TABLE PendingDeltas FROM ROLE fn_apply_counters",
			"spanner role rule: function ApplyCounters writes table PendingDeltas but its database role fn_apply_counters is not granted DELETE on it"},
		// The audit trail is append-only: no role rewrites or deletes an
		// entry, and each holds only what its code does on it.
		{"GRANT UPDATE ON TABLE ModerationLog TO ROLE fn_moderation",
			"spanner role rule: function Moderation's database role fn_moderation is granted UPDATE on table ModerationLog, which its code (github.com/videngage/engagement/functions/moderation and what it links) does not need"},
		{"GRANT DELETE ON TABLE ModerationLog TO ROLE fn_erase_account",
			"spanner role rule: function EraseAccount's database role fn_erase_account is granted DELETE on table ModerationLog, which its code"},
		{"GRANT INSERT ON TABLE ModerationLog TO ROLE fn_prepare_export",
			"spanner role rule: function PrepareExport's database role fn_prepare_export is granted INSERT on table ModerationLog, which its code"},
		{"GRANT SELECT ON TABLE ModerationLog TO ROLE fn_apply_views",
			"spanner role rule: function ApplyViews's database role fn_apply_views is granted SELECT on table ModerationLog, which its code"},
		{"REVOKE INSERT ON TABLE ModerationLog FROM ROLE fn_detect_manipulation",
			"spanner role rule: function DetectManipulation writes table ModerationLog but its database role fn_detect_manipulation is not granted INSERT on it"},
		{"CREATE ROLE fn_spare",
			"spanner role rule: the DDL creates database role fn_spare, which no function connects as"},
	} {
		schema, err := ParseSchema(append(append([]string(nil), code.DDL...), tc.stmt))
		if err != nil {
			t.Fatal(err)
		}
		got := SpannerRoleRule(res["dev"].PlanJSON, code, schema, touches)
		if !containsErr(got, tc.want) {
			t.Errorf("with %q the rule did not report %q; it said: %v", tc.stmt, tc.want, errors.Join(got...))
		} else {
			t.Logf("fails as it must: %s", tc.want)
		}
	}
}

// A copy whose functions keep databaseUser (schema changes included), or may
// assume any database role, fails the rule.
func TestSpannerRoleRuleFailsWhenBroken(t *testing.T) {
	needToolchain(t)
	code := loadCode(t)
	schema, touches := spannerTouches(t, code)
	root := copyOf(t, func(root string) {
		replaceIn(t, "spanner.tf", `role     = "roles/spanner.fineGrainedAccessUser"`, `role     = "roles/spanner.databaseUser"`)(root)
		replaceIn(t, "spanner.tf", ` && resource.name.endsWith(\"/databaseRoles/${each.value}\")`, ``)(root)
	})
	r, err := toolchain.CheckEnvironment(root, "dev")
	if err != nil {
		t.Fatalf("the broken copy must still plan (only the rule may catch it): %v", err)
	}
	got := SpannerRoleRule(r.PlanJSON, code, schema, touches)
	for _, want := range []string{
		`spanner role rule: function Reactions does not hold roles/spanner.fineGrainedAccessUser on the database, unconditioned (it holds "roles/spanner.databaseUser")`,
		`grants roles/spanner.databaseUser; function identities act through their database roles only`,
		`spanner role rule: function Reactions holds roles/spanner.databaseRoleUser on "resource.type == \"spanner.googleapis.com/DatabaseRole\"", want only its own role`,
	} {
		if !containsErr(got, want) {
			t.Errorf("the rule did not report %q; it said: %v", want, errors.Join(got...))
		} else {
			t.Logf("fails as it must: %s", want)
		}
	}
}

// A copy of the code that rewrites or deletes audit entries fails the rule
// whatever the grants: the moderation store's entries inserted or updated
// (InsertOrUpdate), and the listing's table, kept in a variable, handed to
// a delete.
func TestSpannerRoleRuleFailsWhenTheTrailIsRewritten(t *testing.T) {
	res, errs := envResults(t)
	if err := errs["dev"]; err != nil {
		t.Fatal(err)
	}
	code := loadCode(t)
	schema, err := ParseSchema(code.DDL)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(repo, "shared", "moderation", "moderationstore", "store.go")
	src := mustRead(t, path)
	for _, e := range []struct{ old, new string }{
		{"spanner.Insert(tableLog,", "spanner.InsertOrUpdate(tableLog,"},
		{`from, where = tableLog, "UserId = @user"`, `from, where = tableLog, "UserId = @user"
		_ = spanner.Delete(from, spanner.Key{f.UserID})`},
	} {
		if !strings.Contains(src, e.old) {
			t.Fatalf("%s does not contain %q", path, e.old)
		}
		src = strings.Replace(src, e.old, e.new, 1)
	}
	touches, err := spannerTablesOf(repo, code, schema, map[string][]byte{path: []byte(src)})
	if err != nil {
		t.Fatal(err)
	}
	got := SpannerRoleRule(res["dev"].PlanJSON, code, schema, touches)
	for _, want := range []string{
		"spanner role rule: function Moderation's code (github.com/videngage/engagement/functions/moderation and what it links) needs UPDATE on table ModerationLog, whose rows the service only ever inserts and reads",
		"spanner role rule: function Moderation writes table ModerationLog but its database role fn_moderation is not granted UPDATE on it",
		"spanner role rule: function ApplyViews's code (github.com/videngage/engagement/functions/applyviews and what it links) needs UPDATE on table ModerationLog",
		"spanner role rule: function Account's code (github.com/videngage/engagement/functions/account and what it links) needs DELETE on table ModerationLog",
		"spanner role rule: function PrepareExport writes table ModerationLog but its database role fn_prepare_export is not granted DELETE on it",
	} {
		if !containsErr(got, want) {
			t.Errorf("the rule did not report %q; it said: %v", want, errors.Join(got...))
		} else {
			t.Logf("fails as it must: %s", want)
		}
	}
}

func TestParseSchema(t *testing.T) {
	s, err := ParseSchema([]string{
		"CREATE TABLE A (K STRING(1)) PRIMARY KEY (K)",
		"CREATE TABLE B (K STRING(1), J STRING(1)) PRIMARY KEY (K, J), INTERLEAVE IN PARENT A ON DELETE CASCADE",
		"CREATE ROLE r",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE A, B TO ROLE r",
		"REVOKE INSERT, UPDATE ON TABLE B FROM ROLE r",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(s.Cascade["A"], " ", s.Grants["r"]["A"], " ", s.Grants["r"]["B"]); got != "[B] SELECT,INSERT,UPDATE,DELETE SELECT,DELETE" {
		t.Errorf("parsed %s", got)
	}
	for _, bad := range []string{
		"GRANT SELECT ON TABLE A TO ROLE nobody",
		"GRANT SELECT ON TABLE Nothing TO ROLE r",
		"GRANT SELECT(K) ON TABLE A TO ROLE r",
		"GRANT ROLE r TO ROLE r",
	} {
		if _, err := ParseSchema([]string{"CREATE TABLE A (K STRING(1)) PRIMARY KEY (K)", "CREATE ROLE r", bad}); err == nil {
			t.Errorf("ParseSchema accepted %q", bad)
		}
	}
}
