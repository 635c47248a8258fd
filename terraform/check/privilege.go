package check

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// BigtableTablesOf maps each function registered under functions/ to the
// Bigtable tables its code can touch: the tables of topology.json named by a
// string constant of a package it imports, directly or not (the stores
// declare theirs: historystore.EntriesTable, ratelimit.Table, ...).
func BigtableTablesOf(repo string, c *Code) (map[string]map[string]bool, error) {
	tables := map[string]bool{}
	for _, t := range c.Topology.Bigtable.Tables {
		tables[t.Name] = true
	}
	pkgTables := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for _, dir := range []string{"shared", "functions"} {
		files, err := goFiles(filepath.Join(repo, dir))
		if err != nil {
			return nil, err
		}
		for _, path := range files {
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(repo, filepath.Dir(path))
			pkg := modulePath + "/" + filepath.ToSlash(rel)
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, s := range gd.Specs {
					for _, v := range s.(*ast.ValueSpec).Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						if name, _ := strconv.Unquote(lit.Value); tables[name] {
							if pkgTables[pkg] == nil {
								pkgTables[pkg] = map[string]bool{}
							}
							pkgTables[pkg][name] = true
						}
					}
				}
			}
		}
	}
	// One go list for every function package: its own path and its deps.
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}", "./functions/...")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list ./functions/...: %w", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			deps[f[0]] = f
		}
	}
	byFunction := map[string]map[string]bool{}
	for name, r := range c.Registered {
		got := map[string]bool{}
		for _, p := range deps[r.Package] {
			for t := range pkgTables[p] {
				got[t] = true
			}
		}
		byFunction[name] = got
	}
	return byFunction, nil
}

var conditionTable = regexp.MustCompile(`resource\.name == "projects/[^/"]+/instances/[^/"]+/tables/([^"]+)"`)

var firestoreCondition = regexp.MustCompile(`^resource\.name == "projects/[^/"]+/databases/([^/"]+)"$`)

// bigtableTableType is the IAM resource type of a Bigtable table.
const bigtableTableType = "bigtableadmin.googleapis.com/Table"

// PrivilegeRule lists each function identity's data grants against what its
// code touches: a Bigtable grant holds a condition naming exactly the tables
// of BigtableTablesOf (and nothing wider), and a Firestore grant a condition
// naming the one database of the deployment. Spanner grants are
// database-wide (roles/spanner.databaseUser/Reader on the one database).
func PrivilegeRule(p *Plan, c *Code, touches map[string]map[string]bool) []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for fn, rc := range p.Instances("google_bigtable_instance_iam_member", "fn") {
		expr := rc.Str("condition", 0, "expression")
		if expr == "" {
			add("privilege rule: function %s holds %s on every table of the Bigtable instance (no condition)", fn, rc.Str("role"))
			continue
		}
		clauses := strings.Split(expr, " || ")
		granted := map[string]bool{}
		for i, cl := range clauses {
			if i == 0 && cl == `resource.type != "`+bigtableTableType+`"` {
				continue // the instance itself and its app profiles
			}
			m := conditionTable.FindStringSubmatch(cl)
			if m == nil || m[0] != cl {
				add("privilege rule: function %s: Bigtable grant condition clause %q is not a table of the instance", fn, cl)
				continue
			}
			granted[m[1]] = true
		}
		want := touches[fn]
		for _, t := range sortedSet(granted) {
			if !want[t] {
				add("privilege rule: function %s is granted Bigtable table %s, which its code (%s and its imports) does not touch", fn, t, c.Registered[fn].Package)
			}
		}
		for _, t := range sortedSet(want) {
			if !granted[t] {
				add("privilege rule: function %s touches Bigtable table %s but is not granted it", fn, t)
			}
		}
	}
	db := p.Instances("google_firestore_database", "main")[""]
	for fn, rc := range p.Instances("google_project_iam_member", "fn_firestore") {
		expr := rc.Str("condition", 0, "expression")
		m := firestoreCondition.FindStringSubmatch(expr)
		if m == nil {
			add("privilege rule: function %s holds %s on every Firestore database of the project (condition %q)", fn, rc.Str("role"), expr)
		} else if m[1] != db.Str("name") {
			add("privilege rule: function %s is granted Firestore database %q, not the deployment's %q", fn, m[1], db.Str("name"))
		}
	}
	return errs
}

// auditedWrites are the data APIs of the stores that hold users' data.
var auditedWrites = []string{"spanner.googleapis.com", "bigtable.googleapis.com", "firestore.googleapis.com", "datastore.googleapis.com", "storage.googleapis.com"}

// AuditLogRule: every store that holds users' data records every write
// through its data API in Data Access audit logs (an audit config with
// DATA_WRITE), so a direct edit of a table — the moderation audit trail's
// included — leaves a record of who made it.
func AuditLogRule(p *Plan) []error {
	logged := map[string]bool{}
	for _, rc := range p.ResourceChanges {
		if rc.Mode != "managed" || rc.Type != "google_project_iam_audit_config" {
			continue
		}
		for i := 0; ; i++ {
			lt := rc.Str("audit_log_config", i, "log_type")
			if lt == "" {
				break
			}
			if lt == "DATA_WRITE" {
				logged[rc.Str("service")] = true
			}
		}
	}
	var errs []error
	for _, s := range auditedWrites {
		if !logged[s] {
			errs = append(errs, fmt.Errorf("audit log rule: writes through %s are not recorded (no Data Access audit config with DATA_WRITE)", s))
		}
	}
	return errs
}
