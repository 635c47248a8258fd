package main

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
	"testing"
	"time"

	"github.com/videngage/engagement/shared/emulators"
)

// freeze stops every process of one emulator with SIGSTOP (the emulators
// keep their data in memory, so this is an outage, not a restart) and
// returns the function that continues them. The test's cleanup continues
// them too, and a detached guard does after a minute should this process
// die in between.
func freeze(t *testing.T, name string) (thaw func()) {
	t.Helper()
	pgid, err := emulatorGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	guard := exec.Command("/bin/sh", "-c", fmt.Sprintf("sleep 60; kill -CONT -%d", pgid))
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := guard.Start(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP the %s emulator: %v", name, err)
	}
	t.Logf("%s emulator frozen (process group %d)", name, pgid)
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := syscall.Kill(-pgid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT the %s emulator: %v", name, err)
			}
			syscall.Kill(-guard.Process.Pid, syscall.SIGKILL)
			guard.Wait()
			t.Logf("%s emulator running again", name)
		})
	}
	t.Cleanup(thaw)
	return thaw
}

// emulatorGroup finds the process group of one emulator of the drills'
// stack: the group holding a process started with its port.
func emulatorGroup(name string) (int, error) {
	host := map[string]string{
		emulators.Spanner:   emu.Hosts.Spanner,
		emulators.Bigtable:  emu.Hosts.Bigtable,
		emulators.PubSub:    emu.Hosts.PubSub,
		emulators.Firestore: emu.Hosts.Firestore,
	}[name]
	_, port, err := net.SplitHostPort(host)
	if err != nil {
		return 0, fmt.Errorf("emulator %q: host %q: %v", name, host, err)
	}
	groups := map[int]bool{}
	for _, g := range emu.ProcessGroups() {
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
	return 0, fmt.Errorf("no process group of the drills' stack runs the %s emulator on port %s", name, port)
}

// outage freezes an emulator for d and continues it.
func outage(t *testing.T, name string, d time.Duration) (from, to time.Time) {
	t.Helper()
	thaw := freeze(t, name)
	from = time.Now()
	time.Sleep(d)
	to = time.Now()
	thaw()
	return from, to
}
