// Command withemulators starts the Google Cloud emulators once, runs a
// command with the *_EMULATOR_HOST variables pointing at them, and stops them:
// `make test` runs every test binary against one stack instead of one each.
//
//	go run ./cmd/withemulators -- go test ./...
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/internal/emulators"
)

func main() {
	os.Exit(run())
}

func run() int {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withemulators -- command [args...]")
		return 2
	}
	ctx, stop := cmdmain.Context()
	defer stop()
	started := time.Now()
	stack, err := emulators.Start(ctx, emulators.Options{LogDir: os.Getenv("EMULATOR_LOG_DIR")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: withemulators:", err)
		return 1
	}
	defer stack.Stop()
	fmt.Fprintf(os.Stderr, "withemulators: emulators answering after %v\n", time.Since(started).Round(time.Millisecond))
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	for k, v := range stack.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "FAIL: withemulators:", err)
		return 1
	}
	return 0
}
