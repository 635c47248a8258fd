package topology

import (
	"testing"

	"cloud.google.com/go/spanner/spansql"
)

func TestAccessControl(t *testing.T) {
	for stmt, want := range map[string]bool{
		"CREATE ROLE fn_counts":                               true,
		"create role fn_counts":                               true,
		"DROP ROLE fn_counts":                                 true,
		"GRANT SELECT ON TABLE Counters TO ROLE fn_counts":    true,
		"REVOKE SELECT ON TABLE Counters FROM ROLE fn_counts": true,
		"CREATE TABLE Roles (Id STRING(36)) PRIMARY KEY (Id)": false,
		"CREATE INDEX RoleByName ON Roles (Name)":             false,
		"ALTER TABLE Counters ADD COLUMN Grants INT64":        false,
	} {
		if got := AccessControl(stmt); got != want {
			t.Errorf("AccessControl(%q) = %v, want %v", stmt, got, want)
		}
	}
	// The schema holds roles, and the emulator's share leaves them out.
	ddl, err := DDL()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range ddl {
		if AccessControl(s) {
			n++
		}
	}
	if n == 0 {
		t.Error("no access-control statement in the DDL")
	}
}

// The emulator parses access-control statements but refuses to apply them,
// and the local stack leaves them out: Google's DDL parser (spansql) is
// what reads them before a deploy does. Every one in the DDL parses, and a
// malformed one does not.
func TestAccessControlParses(t *testing.T) {
	ddl, err := DDL()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ddl {
		if !AccessControl(s) {
			continue
		}
		if _, err := spansql.ParseDDLStmt(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, bad := range []string{
		"REVOKE UPDATE DELETE ON TABLE ModerationLog FROM ROLE fn_moderation",
		"REVOKE UPDATE, DELETE ON ModerationLog FROM ROLE fn_moderation",
		"GRANT SELECT ON TABLE Counters TO fn_counts",
	} {
		if _, err := spansql.ParseDDLStmt(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
