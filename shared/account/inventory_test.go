package account_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/videngage/engagement/shared/topology"
)

// userIDColumns are the column names that hold a user id.
var userIDColumns = []string{"UserId", "AuthorId", "Actor", "RevokedBy"}

var (
	createTable = regexp.MustCompile(`(?is)^\s*CREATE TABLE (\w+) \((.*)\)\s*PRIMARY KEY`)
	addColumn   = regexp.MustCompile(`(?is)^\s*ALTER TABLE (\w+) ADD COLUMN (?:IF NOT EXISTS )?(\w+)`)
	dropTable   = regexp.MustCompile(`(?is)^\s*DROP TABLE (\w+)`)
	columnLine  = regexp.MustCompile(`(?m)^\s*(\w+)\s+[A-Z]`)
	listedRow   = regexp.MustCompile("(?m)^\\| (Spanner|Bigtable) \\| `([^`]+)` \\|")
	noneLine    = regexp.MustCompile("(?m)^No user id \\(Spanner\\):((?:.|\n)*?)\n\n")
	backticked  = regexp.MustCompile("`([^`]+)`")
)

// tables are the Spanner tables the DDL leaves, with their columns.
func tables(t *testing.T) map[string][]string {
	t.Helper()
	ddl, err := topology.DDL()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range ddl {
		if m := createTable.FindStringSubmatch(s); m != nil {
			for _, c := range columnLine.FindAllStringSubmatch(m[2], -1) {
				out[m[1]] = append(out[m[1]], c[1])
			}
		} else if m := addColumn.FindStringSubmatch(s); m != nil {
			out[m[1]] = append(out[m[1]], m[2])
		} else if m := dropTable.FindStringSubmatch(s); m != nil {
			delete(out, m[1])
		}
	}
	return out
}

// TestEveryUserStoreListed: docs/design/account.md lists every Spanner
// table of the DDL and every Bigtable family of topology.json, each as
// holding a user id (with what an erasure does to it) or as holding none; a
// table with a user-id column is never listed as holding none, and nothing
// listed is gone from the schema.
func TestEveryUserStoreListed(t *testing.T) {
	raw, err := os.ReadFile("../../docs/design/account.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i := strings.Index(doc, "## Every store that holds a user id")
	if i < 0 {
		t.Fatal(`docs/design/account.md has no "Every store that holds a user id" section`)
	}
	doc = doc[i:]
	if j := strings.Index(doc[3:], "\n## "); j >= 0 {
		doc = doc[:j+4]
	}
	listed := map[string]bool{}
	for _, m := range listedRow.FindAllStringSubmatch(doc, -1) {
		listed[m[1]+" "+m[2]] = true
	}
	none := map[string]bool{}
	if m := noneLine.FindStringSubmatch(doc); m != nil {
		for _, b := range backticked.FindAllStringSubmatch(m[1], -1) {
			none[b[1]] = true
		}
	}

	schema := tables(t)
	if len(schema) < 10 || schema["Reactions"] == nil || !slices.Contains(schema["Reactions"], "CreateTime") {
		t.Fatalf("the DDL reads as %v: the parser is wrong", schema)
	}
	for name, cols := range schema {
		holds := slices.ContainsFunc(cols, func(c string) bool { return slices.Contains(userIDColumns, c) })
		switch {
		case listed["Spanner "+name] && none[name]:
			t.Errorf("Spanner table %s is listed both as holding a user id and as holding none", name)
		case listed["Spanner "+name]:
		case none[name] && holds:
			t.Errorf("Spanner table %s is listed as holding no user id, but has a user-id column (%v)", name, cols)
		case none[name]:
		default:
			t.Errorf("Spanner table %s is not listed in docs/design/account.md: say what an erasure does to it, or that it holds no user id", name)
		}
	}
	families := map[string]bool{}
	for _, tb := range topology.MustLoad().Bigtable.Tables {
		for _, f := range tb.Families {
			families[tb.Name+"/"+f.Name] = true
			if !listed["Bigtable "+tb.Name+"/"+f.Name] {
				t.Errorf("Bigtable family %s/%s is not listed in docs/design/account.md", tb.Name, f.Name)
			}
		}
	}
	for k := range listed {
		kind, name, _ := strings.Cut(k, " ")
		if kind == "Spanner" && schema[name] == nil || kind == "Bigtable" && !families[name] {
			t.Errorf("docs/design/account.md lists %s %s, which the schema no longer has", kind, name)
		}
	}
	for name := range none {
		if schema[name] == nil {
			t.Errorf("docs/design/account.md lists Spanner table %s as holding no user id; the schema no longer has it", name)
		}
	}
}
