// Package faults freezes one emulator of a stack at a time: SIGSTOP to its
// process group, SIGCONT to end the outage. The emulators keep their data in
// memory, so a frozen emulator is an outage, not a restart. Used by the soak
// (cmd/soak) and the fault drills (cmd/drills).
package faults

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/videngage/engagement/internal/emulators"
)

// Group finds the process group of one emulator of s (emulators.Spanner,
// …): the group holding a process started with its port.
func Group(s *emulators.Stack, name string) (int, error) {
	host := map[string]string{
		emulators.Spanner:   s.Hosts.Spanner,
		emulators.Bigtable:  s.Hosts.Bigtable,
		emulators.PubSub:    s.Hosts.PubSub,
		emulators.Firestore: s.Hosts.Firestore,
	}[name]
	_, port, err := net.SplitHostPort(host)
	if err != nil {
		return 0, fmt.Errorf("emulator %q: host %q: %v", name, host, err)
	}
	groups := map[int]bool{}
	for _, g := range s.ProcessGroups() {
		groups[g] = true
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: comm may hold anything, so read
		// after its closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		pgrp, _ := strconv.Atoi(f[2])
		if !groups[pgrp] {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			if bytes.HasSuffix(arg, []byte("port="+port)) {
				return pgrp, nil
			}
		}
	}
	return 0, fmt.Errorf("no process group of the stack runs the %s emulator on port %s", name, port)
}

// Freeze stops every process of one emulator of s and returns the function
// that continues them (safe to call more than once). A detached guard
// continues them after guardAfter should this process die in between.
func Freeze(s *emulators.Stack, name string, guardAfter time.Duration) (thaw func() error, err error) {
	pgid, err := Group(s, name)
	if err != nil {
		return nil, err
	}
	guard := exec.Command("/bin/sh", "-c", fmt.Sprintf("sleep %d; kill -CONT -%d", int(guardAfter.Seconds())+1, pgid))
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := guard.Start(); err != nil {
		return nil, fmt.Errorf("start the guard: %w", err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		syscall.Kill(-guard.Process.Pid, syscall.SIGKILL)
		guard.Wait()
		return nil, fmt.Errorf("SIGSTOP the %s emulator: %w", name, err)
	}
	var once sync.Once
	return func() error {
		var err error
		once.Do(func() {
			if e := syscall.Kill(-pgid, syscall.SIGCONT); e != nil {
				err = fmt.Errorf("SIGCONT the %s emulator: %w", name, e)
			}
			syscall.Kill(-guard.Process.Pid, syscall.SIGKILL)
			guard.Wait()
		})
		return err
	}, nil
}
