package topology

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// LockFile is the lock of the applied Spanner DDL, beside the DDL files.
const LockFile = "ddl.lock"

// ErrUnlocked reports statements that the lock does not hold yet: new DDL
// that `go run ./tools/ddllock` appends.
var ErrUnlocked = errors.New("DDL statements not in " + LockFile)

// Statement is one DDL statement and the file it comes from.
type Statement struct {
	File string
	SQL  string
}

// Hash is the hex SHA-256 of the statement as Terraform and the emulators
// send it (trimmed, comment lines dropped): any change of its text, white
// space inside included, is a different statement to the provider.
func (s Statement) Hash() string {
	h := sha256.Sum256([]byte(s.SQL))
	return hex.EncodeToString(h[:])
}

// ReadDDL reads the statements of every *.sql file of fsys's root, in file
// name order, split as DDL does.
func ReadDDL(fsys fs.FS) ([]Statement, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []Statement
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		for _, s := range SplitDDL(string(b)) {
			out = append(out, Statement{File: n, SQL: s})
		}
	}
	return out, nil
}

// LockEntry is one applied statement: its file, its hash, and the chained
// hash of every entry up to it.
type LockEntry struct {
	File, Hash, Chain string
}

// Lock is the applied DDL history, in the order the statements were
// applied: as atlas.sum does for migration files, it lets a check refuse any
// change but an append. The provider applies statements appended to the
// google_spanner_database ddl list in place and recreates the database for
// any other change, so this history may only grow.
type Lock struct {
	Entries []LockEntry
}

// chain is the next chained hash: SHA-256 of the previous one and the
// statement's hash.
func chain(prev, hash string) string {
	h := sha256.Sum256([]byte(prev + "\n" + hash))
	return hex.EncodeToString(h[:])
}

// Sum is the chained hash of the whole lock ("" when empty).
func (l *Lock) Sum() string {
	if len(l.Entries) == 0 {
		return ""
	}
	return l.Entries[len(l.Entries)-1].Chain
}

const lockHeader = `# The Spanner DDL statements applied, in order (shared/topology/ddl/*.sql).
# Append-only: "go run ./tools/ddllock" appends new statements; editing,
# removing or inserting before a statement listed here fails the tests,
# because the provider would recreate the database (docs/operations.md).
# Lines: file, SHA-256 of the statement, chained SHA-256 (of the previous
# line's chained hash and this statement's hash). sum: the last chained hash.
`

// Format writes the lock file.
func (l *Lock) Format() []byte {
	var b strings.Builder
	b.WriteString(lockHeader)
	fmt.Fprintf(&b, "sum %s\n", l.Sum())
	for _, e := range l.Entries {
		fmt.Fprintf(&b, "%s %s %s\n", e.File, e.Hash, e.Chain)
	}
	return []byte(b.String())
}

// ParseLock reads a lock file and verifies its own chain, so that a lock
// edited by hand (an entry changed, dropped or inserted) is refused.
func ParseLock(src []byte) (*Lock, error) {
	l := &Lock{}
	sum, haveSum := "", false
	sc := bufio.NewScanner(strings.NewReader(string(src)))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "sum" && !haveSum {
			sum, haveSum = f[1], true
			continue
		}
		if len(f) != 3 || len(f[1]) != 64 || len(f[2]) != 64 {
			return nil, fmt.Errorf("%s line %d: want \"<file> <sha256> <chained sha256>\", got %q", LockFile, n, line)
		}
		e := LockEntry{File: f[0], Hash: f[1], Chain: f[2]}
		if want := chain(l.Sum(), e.Hash); e.Chain != want {
			return nil, fmt.Errorf("%s line %d: the chained hash does not follow from the lines above: the lock was edited by hand (only go run ./tools/ddllock writes it)", LockFile, n)
		}
		l.Entries = append(l.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !haveSum && len(l.Entries) > 0 {
		return nil, fmt.Errorf("%s: no sum line", LockFile)
	}
	if sum != l.Sum() {
		return nil, fmt.Errorf("%s: sum %s is not the last chained hash %s: the lock was cut or edited by hand", LockFile, sum, l.Sum())
	}
	return l, nil
}

// Check compares the statements of the DDL files with the lock: every
// locked statement must still be there, unchanged, in the same place and
// file; statements after the last locked one are new. It returns an error
// wrapping ErrUnlocked when the only difference is new statements.
func (l *Lock) Check(stmts []Statement) error {
	var errs []error
	hashes := make([]string, len(stmts))
	for i, s := range stmts {
		hashes[i] = s.Hash()
	}
	indexFrom := func(list []string, h string, from int) int {
		for j := from; j < len(list); j++ {
			if list[j] == h {
				return j
			}
		}
		return -1
	}
	locked := make([]string, len(l.Entries))
	for i, e := range l.Entries {
		locked[i] = e.Hash
	}
	for i, e := range l.Entries {
		if i >= len(stmts) {
			errs = append(errs, fmt.Errorf("applied statement %d (%s) and the %d after it were removed: the DDL list would get shorter, and the provider recreates the database", i+1, e.File, len(l.Entries)-i-1))
			break
		}
		if hashes[i] == e.Hash {
			if stmts[i].File != e.File {
				errs = append(errs, fmt.Errorf("applied statement %d moved from %s to %s: applied files are never renamed", i+1, e.File, stmts[i].File))
			}
			continue
		}
		switch {
		case indexFrom(hashes, e.Hash, i+1) > 0:
			errs = append(errs, fmt.Errorf("statement %d (%s) was inserted before applied statement %d (%s): new DDL goes after every applied statement, in a file that sorts last", i+1, stmts[i].File, i+1, e.File))
		case indexFrom(locked, hashes[i], i+1) > 0:
			errs = append(errs, fmt.Errorf("applied statement %d (%s) was removed: the provider recreates the database", i+1, e.File))
		default:
			errs = append(errs, fmt.Errorf("applied statement %d (%s) was edited (now %.60q): the provider recreates the database for a changed statement; write a new statement in a new file instead", i+1, e.File, stmts[i].SQL))
		}
		// The rest is shifted: one report is enough.
		return errors.Join(errs...)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if n := len(stmts) - len(l.Entries); n > 0 {
		return fmt.Errorf("%w: %d new, from %s on; append them with go run ./tools/ddllock", ErrUnlocked, n, stmts[len(l.Entries)].File)
	}
	return nil
}

// Append returns the lock with the statements after its last entry added,
// and refuses (with Check's error) when any locked statement changed.
func (l *Lock) Append(stmts []Statement) (*Lock, error) {
	if err := l.Check(stmts); err != nil && !errors.Is(err, ErrUnlocked) {
		return nil, err
	}
	out := &Lock{Entries: append([]LockEntry(nil), l.Entries...)}
	for _, s := range stmts[len(l.Entries):] {
		h := s.Hash()
		out.Entries = append(out.Entries, LockEntry{File: s.File, Hash: h, Chain: chain(out.Sum(), h)})
	}
	return out, nil
}

// LockedDDL reads the DDL files and the lock of dir and returns the
// statements, after checking that the lock holds every one of them
// unchanged: the schema the database has once this commit is applied.
func LockedDDL(dir fs.FS) ([]string, error) {
	stmts, err := ReadDDL(dir)
	if err != nil {
		return nil, err
	}
	b, err := fs.ReadFile(dir, LockFile)
	if err != nil {
		return nil, err
	}
	l, err := ParseLock(b)
	if err != nil {
		return nil, err
	}
	if err := l.Check(stmts); err != nil {
		return nil, err
	}
	out := make([]string, len(stmts))
	for i, s := range stmts {
		out[i] = s.SQL
	}
	return out, nil
}
