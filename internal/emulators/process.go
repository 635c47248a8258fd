package emulators

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Every emulator runs in a process group of its own, led by a watchdog shell:
//
//	watchdog (sh, group leader, stdin = a pipe whose write end only we hold)
//	└─ emulator (Pdeathsig SIGKILL) ─ its own children (java, emulator_main)
//
// Stop signals the whole group. When this process dies without Stop (kill -9,
// a panic, a test binary timing out), the kernel closes the write end of the
// pipe, the watchdog's read returns, and it signals its group: the emulator
// and whatever it forked die with it. That covers what Pdeathsig alone cannot:
// gateway_main forks emulator_main, and the Firestore wrapper is a bash script
// that runs java as a child instead of exec'ing it, and Pdeathsig reaches only
// the direct child. Pdeathsig stays as the immediate first line.

// watchdogScript is run by /bin/sh with the grace period in seconds as $1. It
// ignores the signals it sends (and a terminal's), so that it survives its
// own group's SIGTERM and can follow up with SIGKILL; its group id is its pid.
const watchdogScript = `trap '' TERM INT HUP QUIT
read _
kill -TERM -$$ 2>/dev/null
sleep "$1"
kill -KILL -$$`

// EnvOwner is set in the environment of every emulator process (and so of
// whatever it forks) to the pid of the process that started it.
const EnvOwner = "EMULATORS_OWNER_PID"

// stopGrace is how long an emulator has between SIGTERM and SIGKILL.
const stopGrace = 3 * time.Second

// spawner forks every child of a stack from one locked OS thread that lives
// as long as the stack. Linux delivers the parent-death signal when the
// forking thread exits, not the process, and the Go runtime may retire the
// thread behind an ordinary goroutine at any time.
type spawner struct {
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq)}
	go func() {
		// Never unlocked: when the stack stops and this goroutine returns,
		// the runtime terminates the thread, which also signals any child
		// still alive.
		runtime.LockOSThread()
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	s.reqs <- spawnReq{cmd, done}
	return <-done
}

func (s *spawner) close() { close(s.reqs) }

// process is one emulator and its watchdog.
type process struct {
	name     string
	watchdog *exec.Cmd
	cmd      *exec.Cmd
	lifeline *os.File // write end of the watchdog's stdin
	exited   chan struct{}
	waitErr  error
	output   *tail
	closeLog func() error
}

// startProcess starts argv in a new process group with its watchdog.
func startProcess(sp *spawner, name string, argv []string, out io.Writer, closeLog func() error) (*process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, lifeline: w, exited: make(chan struct{}), output: &tail{max: 16 << 10}, closeLog: closeLog}
	p.watchdog = exec.Command("/bin/sh", "-c", watchdogScript, "watchdog", fmt.Sprint(int(stopGrace/time.Second)))
	p.watchdog.Stdin = r
	p.watchdog.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = sp.start(p.watchdog)
	r.Close()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("start %s watchdog: %w", name, err)
	}
	pgid := p.watchdog.Process.Pid

	p.cmd = exec.Command(argv[0], argv[1:]...)
	// Inherited by everything the emulator forks: finds them in /proc.
	p.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", EnvOwner, os.Getpid()))
	p.cmd.Stdout = io.MultiWriter(p.output, out)
	p.cmd.Stderr = p.cmd.Stdout
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
	// A grandchild keeping the output pipe open must not hang Wait.
	p.cmd.WaitDelay = time.Second
	if err := sp.start(p.cmd); err != nil {
		p.kill()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// pgid is the process group of the emulator and everything it forked.
func (p *process) pgid() int { return p.watchdog.Process.Pid }

// stop sends SIGTERM to the group, waits up to stopGrace for the emulator to
// exit, then sends SIGKILL to whatever is left in the group.
func (p *process) stop() {
	_ = syscall.Kill(-p.pgid(), syscall.SIGTERM)
	if p.cmd.Process != nil {
		select {
		case <-p.exited:
		case <-time.After(stopGrace):
		}
	}
	p.kill()
}

func (p *process) kill() {
	_ = syscall.Kill(-p.pgid(), syscall.SIGKILL)
	p.lifeline.Close()
	_ = p.watchdog.Wait()
	if p.cmd.Process != nil {
		<-p.exited
	}
	if p.closeLog != nil {
		_ = p.closeLog()
	}
}

// exitError describes an emulator that exited on its own; it wraps errExited.
func (p *process) exitError() error {
	status := "status 0"
	if p.waitErr != nil {
		status = p.waitErr.Error()
	}
	return fmt.Errorf("%s emulator %w (%s):\n%s", p.name, errExited, status, p.output.String())
}

// tail keeps the last max bytes written to it, for error messages.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(bytes.TrimSpace(t.buf))
}

// prefixWriter writes each line to w prefixed with "[name] ".
type prefixWriter struct {
	mu      *sync.Mutex // shared by the writers of one stack
	w       io.Writer
	prefix  []byte
	partial []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			break
		}
		line := append(append(append([]byte{}, p.prefix...), p.partial...), b[:i+1]...)
		p.partial = p.partial[:0]
		if _, err := p.w.Write(line); err != nil {
			return n, nil // logging must never stop an emulator
		}
		b = b[i+1:]
	}
	return n, nil
}
