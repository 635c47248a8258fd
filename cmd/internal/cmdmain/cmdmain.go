// Package cmdmain is the opening the commands share: main calls
// Run(name, realMain), and realMain gets a context that an interrupt or
// SIGTERM cancels, so that its deferred clean-up runs before the process
// ends.
package cmdmain

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Context returns a context canceled by an interrupt or SIGTERM, and the
// function that stops watching for them.
func Context() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Run calls realMain with Context's context; when realMain fails, it prints
// "name: error" to stderr and exits 1.
func Run(name string, realMain func(ctx context.Context) error) {
	ctx, stop := Context()
	err := realMain(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
