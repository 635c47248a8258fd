//go:build unix

package cmdmain

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// childEnv makes the test binary run Run itself, failing with the value's
// message or succeeding when it is "ok".
const childEnv = "CMDMAIN_TEST_CHILD"

func TestMain(m *testing.M) {
	if msg, ok := os.LookupEnv(childEnv); ok {
		Run("demo", func(context.Context) error {
			if msg == "ok" {
				return nil
			}
			return errors.New(msg)
		})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestRunExitStatus(t *testing.T) {
	for _, tc := range []struct {
		child, stderr string
		code          int
	}{
		{child: "ok", stderr: "", code: 0},
		{child: "no database", stderr: "demo: no database\n", code: 1},
	} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+tc.child)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", tc.child, err)
		}
		if code != tc.code || stderr.String() != tc.stderr {
			t.Errorf("%s: exit %d, stderr %q; want exit %d, stderr %q", tc.child, code, stderr.String(), tc.code, tc.stderr)
		}
	}
}

func TestContextCanceledBySignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		ctx, stop := Context()
		if err := syscall.Kill(os.Getpid(), sig); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("%v did not cancel the context", sig)
		}
		stop()
	}
}
