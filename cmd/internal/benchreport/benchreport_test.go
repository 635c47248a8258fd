package benchreport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteOverwrites: a report replaces the file, stamped with every
// field, and a second run leaves nothing of the first.
func TestWriteOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.md")
	if err := os.WriteFile(path, []byte("an older run's figures\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := Start("go run ./cmd/bench -only views")
	if err := s.Write(path, "Views", "| a | b |\n"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{
		"# Views\n\nRerun: `go run ./cmd/bench -only views`\n\n",
		"- commit: " + s.Commit + "\n",
		"- date: " + s.Started.Format(time.RFC3339) + "\n",
		"- machine: " + s.Machine + "\n",
		"- uptime before: " + s.UptimeBefore + "\n",
		"- uptime after: " + s.UptimeAfter + "\n\n| a | b |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "older run") {
		t.Errorf("the report appended to the file:\n%s", got)
	}
	if s.UptimeAfter == "" || s.UptimeBefore == "" {
		t.Errorf("uptime before %q, after %q", s.UptimeBefore, s.UptimeAfter)
	}
	if s.Started.Location() != time.UTC {
		t.Errorf("date in %v, not UTC", s.Started.Location())
	}

	if err := Start("second").Write(path, "Views", "second body\n"); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if strings.Count(string(b), "# Views") != 1 || strings.Contains(string(b), "| a | b |") {
		t.Errorf("the second run kept the first's report:\n%s", b)
	}
}

// TestCommitMarksChanges: the commit of a checkout with a changed tracked
// file carries "+changes"; a clean one does not.
func TestCommitMarksChanges(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := execGit(dir, args...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "f")
	t.Chdir(dir)
	clean := Commit()
	if clean == "unknown" || strings.Contains(clean, "+") {
		t.Fatalf("clean checkout: %q", clean)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Commit(); got != clean+"+changes" {
		t.Errorf("changed checkout: %q, want %q", got, clean+"+changes")
	}
}

func TestMachine(t *testing.T) {
	m := Machine()
	for _, want := range []string{" CPUs", "/", "go1"} {
		if !strings.Contains(m, want) {
			t.Errorf("Machine() = %q, lacks %q", m, want)
		}
	}
	if got := parseMemTotal("MemTotal:       25165824 kB\nMemFree: 1 kB\n"); got != "24 GiB memory" {
		t.Errorf("parseMemTotal = %q", got)
	}
	if got := parseMemTotal("nothing"); got != "" {
		t.Errorf("parseMemTotal(nothing) = %q", got)
	}
}

func TestRerun(t *testing.T) {
	if got, want := rerun(baseName("/tmp/go-build123/b001/exe/benchjobs"), []string{"-moved", "0"}), "go run ./cmd/withemulators -- go run ./cmd/benchjobs -moved 0"; got != want {
		t.Errorf("rerun = %q, want %q", got, want)
	}
}

func execGit(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	return cmd
}
