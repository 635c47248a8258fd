// Command local runs the whole system on this machine: the Google Cloud
// emulators, every function in one process, a local token issuer and a local
// scheduler. It is README command 1 (`make run`).
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"

	_ "github.com/videngage/engagement"
	"github.com/videngage/engagement/cmd/internal/cmdmain"
)

func main() {
	stopWithParent()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	cmdmain.Run("local", func(ctx context.Context) error {
		// An interrupt or SIGTERM is how the local stack stops.
		if err := realMain(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
}
