// Package benchreport stamps and writes the benchmarks' reports in
// docs/benchmarks: each file says which commit ran, when, on what machine,
// how loaded the machine was before and after, and the command that reruns
// it. A report overwrites its file: the file is the last run, never a diary.
package benchreport

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Stamp is where and when a run happened.
type Stamp struct {
	// Commit is the short hash of HEAD, "+changes" when tracked files
	// differ from it ("unknown" outside a git checkout).
	Commit string
	// Started is when the run started, in UTC.
	Started time.Time
	// Machine is the CPU model, CPU count, memory, OS and architecture and
	// Go version.
	Machine string
	// UptimeBefore and UptimeAfter are `uptime` at the start and at the
	// end: the load of a shared machine, which the figures depend on.
	UptimeBefore, UptimeAfter string
	// Command reruns the benchmark.
	Command string
}

// Start stamps a run starting now, rerun by command (empty: this process's
// `go run` command line, see RerunCommand).
func Start(command string) *Stamp {
	if command == "" {
		command = RerunCommand()
	}
	return &Stamp{
		Commit:       Commit(),
		Started:      time.Now().UTC(),
		Machine:      Machine(),
		UptimeBefore: Uptime(),
		Command:      command,
	}
}

// Finish notes the load at the end of the run; Write calls it when the
// caller did not.
func (s *Stamp) Finish() {
	s.UptimeAfter = Uptime()
}

// Header is the Markdown that opens a report: its title, the command and
// the stamp.
func (s *Stamp) Header(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "Rerun: `%s`\n\n", s.Command)
	fmt.Fprintf(&b, "- commit: %s\n", s.Commit)
	fmt.Fprintf(&b, "- date: %s\n", s.Started.Format(time.RFC3339))
	fmt.Fprintf(&b, "- machine: %s\n", s.Machine)
	fmt.Fprintf(&b, "- uptime before: %s\n", s.UptimeBefore)
	fmt.Fprintf(&b, "- uptime after: %s\n\n", s.UptimeAfter)
	return b.String()
}

// Report is the whole report: the header, then body. It finishes the
// stamp when the caller did not.
func (s *Stamp) Report(title, body string) string {
	if s.UptimeAfter == "" {
		s.Finish()
	}
	return s.Header(title) + body
}

// Write replaces path with the report (Report): never appends.
func (s *Stamp) Write(path, title, body string) error {
	return os.WriteFile(path, []byte(s.Report(title, body)), 0o644)
}

// Commit is the short hash of the working directory's checkout's HEAD,
// with "+changes" when a tracked file differs from it, or "unknown".
func Commit() string { return CommitAt("") }

// CommitAt is Commit of the checkout at dir ("": the working directory).
func CommitAt(dir string) string {
	git := func(args ...string) ([]byte, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		return cmd.Output()
	}
	out, err := git("rev-parse", "--short", "HEAD")
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := git("status", "--porcelain", "--untracked-files=no"); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+changes"
	}
	return c
}

// Machine describes this machine: CPU model, CPU count, memory, OS and
// architecture, Go version.
func Machine() string {
	parts := []string{}
	if m := cpuModel(); m != "" {
		parts = append(parts, m)
	}
	parts = append(parts, fmt.Sprintf("%d CPUs", runtime.NumCPU()))
	if m := memTotal(); m != "" {
		parts = append(parts, m)
	}
	parts = append(parts, runtime.GOOS+"/"+runtime.GOARCH, runtime.Version())
	return strings.Join(parts, ", ")
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return ""
	}
	return parseMemTotal(string(b))
}

// parseMemTotal reads MemTotal from /proc/meminfo's text, in GiB.
func parseMemTotal(meminfo string) string {
	for l := range strings.SplitSeq(meminfo, "\n") {
		v, ok := strings.CutPrefix(l, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return ""
		}
		kb, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("%.0f GiB memory", kb/(1<<20))
	}
	return ""
}

// Uptime is the output of uptime(1): the time, and the load averages.
func Uptime() string {
	out, err := exec.Command("uptime").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// RerunCommand is the command that reruns this process: `go run` of its
// package on the emulators with the same arguments. The package is the
// binary's, as `go run` names it (cmd/<name>).
func RerunCommand() string {
	name := "unknown"
	if len(os.Args) > 0 {
		name = baseName(os.Args[0])
	}
	return rerun(name, os.Args[1:])
}

func rerun(name string, args []string) string {
	return strings.TrimSpace("go run ./cmd/withemulators -- go run ./cmd/" + name + " " + strings.Join(args, " "))
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	return strings.TrimSuffix(p, ".exe")
}
