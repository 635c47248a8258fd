package localstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A child process of the local stack (a region, a drill's events instance)
// gets two pipes from its parent: it writes the address it serves on to
// the first once it serves (ChildReady), and reads the second, which
// reaches EOF when the parent is gone, however it died (ParentGone).
const (
	childReadyFD = 3
	childLifeFD  = 4
	// envChild, set in the child, says the two pipes are there.
	envChild = "LOCALSTACK_CHILD_PIPES"
)

// Child is a running child process.
type Child struct {
	Cmd  *exec.Cmd
	Addr string // the address it reported
	// Exited is closed once the process has exited, Code its exit code.
	Exited   chan struct{}
	Code     int
	lifeline *os.File
}

// StartChild starts cmd, whose program calls ChildReady once it serves,
// and returns once it did, or fails when the process exits first or does
// not report within `within` (it is killed then).
func StartChild(cmd *exec.Cmd, within time.Duration) (*Child, error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		readyR.Close()
		readyW.Close()
		return nil, err
	}
	c := &Child{Cmd: cmd, Exited: make(chan struct{}), lifeline: lifeW}
	cmd.ExtraFiles = []*os.File{readyW, lifeR} // fds 3 and 4
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	// A copy: callers may share one environment between children.
	cmd.Env = append(slices.Clone(cmd.Env), envChild+"=1")
	err = cmd.Start()
	readyW.Close()
	lifeR.Close()
	if err != nil {
		readyR.Close()
		lifeW.Close()
		return nil, err
	}
	go func() {
		cmd.Wait()
		c.Code = cmd.ProcessState.ExitCode()
		close(c.Exited)
	}()
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		readyR.Close()
		addr <- strings.TrimSpace(line)
	}()
	select {
	case a := <-addr:
		if a == "" {
			<-c.Exited
			lifeW.Close()
			return nil, fmt.Errorf("%s exited before serving (code %d)", cmd.Path, c.Code)
		}
		c.Addr = a
		return c, nil
	case <-time.After(within):
		c.Kill()
		return nil, fmt.Errorf("%s did not serve within %v", cmd.Path, within)
	}
}

// Kill kills the process with SIGKILL and waits for it to exit.
func (c *Child) Kill() {
	c.Cmd.Process.Kill()
	c.lifeline.Close()
	<-c.Exited
}

// Stop asks the process to stop (SIGTERM) and waits for it, killing it
// after grace.
func (c *Child) Stop(grace time.Duration) {
	c.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.Exited:
		c.lifeline.Close()
	case <-time.After(grace):
		c.Kill()
	}
}

// Release closes this process's end of the lifeline of a child that
// exited by itself.
func (c *Child) Release() { c.lifeline.Close() }

// ChildReady tells the parent (StartChild) that this process serves on
// addr.
func ChildReady(addr string) error {
	if os.Getenv(envChild) == "" {
		return nil // started by hand: no parent to tell
	}
	ready := os.NewFile(childReadyFD, "ready")
	defer ready.Close()
	_, err := fmt.Fprintln(ready, addr)
	return err
}

// ParentGone returns a context that ends with ctx or when the parent
// (StartChild) is gone, however it died.
func ParentGone(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if os.Getenv(envChild) != "" {
		life := os.NewFile(childLifeFD, "lifeline")
		go func() {
			io.Copy(io.Discard, life)
			cancel()
		}()
	}
	return ctx, cancel
}
