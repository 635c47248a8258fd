package topology

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

// ddlCopy is an in-memory copy of ddl/ (the files and the committed lock).
func ddlCopy(t *testing.T) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	entries, err := os.ReadDir("ddl")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile("ddl/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = &fstest.MapFile{Data: b}
	}
	return m
}

func checkCopy(t *testing.T, m fstest.MapFS) error {
	t.Helper()
	l, err := ParseLock(m[LockFile].Data)
	if err != nil {
		return err
	}
	stmts, err := ReadDDL(m)
	if err != nil {
		t.Fatal(err)
	}
	return l.Check(stmts)
}

// The committed lock holds every statement of ddl/*.sql, in order, and the
// statements are those DDL (the local stack) and Terraform apply.
func TestDDLLockHoldsEveryStatement(t *testing.T) {
	m := ddlCopy(t)
	if m[LockFile] == nil {
		t.Fatalf("no ddl/%s: create it with go run ./tools/ddllock", LockFile)
	}
	if err := checkCopy(t, m); err != nil {
		t.Fatalf("ddl/%s: %v", LockFile, err)
	}
	locked, err := LockedDDL(m)
	if err != nil {
		t.Fatal(err)
	}
	all, err := DDL()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(locked, "\x00") != strings.Join(all, "\x00") {
		t.Fatalf("LockedDDL (%d statements) differs from DDL (%d)", len(locked), len(all))
	}
}

// Every change but an append fails, each with its own report; an append is
// reported as unlocked until Append records it.
func TestDDLLockRefusesAllButAppend(t *testing.T) {
	first := func(m fstest.MapFS) string {
		names, _ := fs.Glob(m, "*.sql")
		return names[0]
	}
	last := func(m fstest.MapFS) string {
		names, _ := fs.Glob(m, "*.sql")
		return names[len(names)-1]
	}
	lastFile := last(ddlCopy(t))
	renamed := strings.TrimSuffix(lastFile, ".sql") + "_renamed.sql"
	cases := []struct {
		name string
		edit func(m fstest.MapFS)
		want string
	}{
		{
			name: "applied statement re-wrapped",
			edit: func(m fstest.MapFS) {
				f := first(m)
				m[f].Data = []byte(strings.Replace(string(m[f].Data), "(", "(\n  ", 1))
			},
			want: "applied statement 1 (000_schema.sql) was edited",
		},
		{
			name: "applied file removed",
			edit: func(m fstest.MapFS) { delete(m, last(m)) },
			want: "removed: the DDL list would get shorter",
		},
		{
			name: "applied statement removed from the middle",
			edit: func(m fstest.MapFS) {
				const f = "010_counters.sql"
				stmts := SplitDDL(string(m[f].Data))
				m[f].Data = []byte(strings.Join(append(stmts[:1:1], stmts[2:]...), ";\n") + ";\n")
			},
			want: "applied statement 3 (010_counters.sql) was removed",
		},
		{
			name: "file inserted before an applied one",
			edit: func(m fstest.MapFS) {
				m["005_early.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE Early (Id STRING(36) NOT NULL) PRIMARY KEY (Id);\n")}
			},
			want: "was inserted before applied statement",
		},
		{
			name: "applied file renamed",
			edit: func(m fstest.MapFS) {
				m[renamed] = m[lastFile]
				delete(m, lastFile)
			},
			want: "moved from " + lastFile + " to " + renamed,
		},
		{
			name: "lock entry changed by hand",
			edit: func(m fstest.MapFS) {
				lines := strings.Split(string(m[LockFile].Data), "\n")
				for i, l := range lines {
					if strings.HasPrefix(l, "010_") {
						f := strings.Fields(l)
						lines[i] = f[0] + " " + strings.Repeat("0", 64) + " " + f[2]
						break
					}
				}
				m[LockFile].Data = []byte(strings.Join(lines, "\n"))
			},
			want: "the lock was edited by hand",
		},
		{
			name: "lock cut short by hand",
			edit: func(m fstest.MapFS) {
				s := strings.TrimRight(string(m[LockFile].Data), "\n")
				m[LockFile].Data = []byte(s[:strings.LastIndex(s, "\n")+1])
			},
			want: "is not the last chained hash",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := ddlCopy(t)
			tc.edit(m)
			err := checkCopy(t, m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if errors.Is(err, ErrUnlocked) {
				t.Fatalf("reported as a mere append: %v", err)
			}
			if stmts, rerr := ReadDDL(m); rerr == nil {
				if l, perr := ParseLock(m[LockFile].Data); perr == nil {
					if _, aerr := l.Append(stmts); aerr == nil {
						t.Fatal("Append accepted a history that is not an append")
					}
				}
			}
		})
	}

	t.Run("append", func(t *testing.T) {
		m := ddlCopy(t)
		m["999_appended.sql"] = &fstest.MapFile{Data: []byte("-- a new table\nCREATE TABLE Appended (Id STRING(36) NOT NULL) PRIMARY KEY (Id);\nCREATE INDEX AppendedById ON Appended (Id);\n")}
		err := checkCopy(t, m)
		if !errors.Is(err, ErrUnlocked) || !strings.Contains(err.Error(), "2 new, from 999_appended.sql on") {
			t.Fatalf("new statements: got %v, want ErrUnlocked for 2 statements", err)
		}
		old, err := ParseLock(m[LockFile].Data)
		if err != nil {
			t.Fatal(err)
		}
		stmts, err := ReadDDL(m)
		if err != nil {
			t.Fatal(err)
		}
		next, err := old.Append(stmts)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(next.Entries) - len(old.Entries); got != 2 {
			t.Fatalf("appended %d entries, want 2", got)
		}
		for i, e := range old.Entries {
			if next.Entries[i] != e {
				t.Fatalf("entry %d changed on append: %v -> %v", i+1, e, next.Entries[i])
			}
		}
		m[LockFile].Data = next.Format()
		if err := checkCopy(t, m); err != nil {
			t.Fatalf("after the append: %v", err)
		}
		if _, err := LockedDDL(m); err != nil {
			t.Fatal(err)
		}
	})
}
