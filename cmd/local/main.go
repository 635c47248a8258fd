// Command local runs the whole system on this machine: the Google Cloud
// emulators, every function in one process, a local token issuer and a local
// scheduler. It is README command 1 (`make run`).
//
// With REGIONS=2 it runs two regions instead, each a process of this
// program started as `local -region <name>` serving every function with
// its own scheduler, behind one local load balancer on PORT: killing one
// region's process is the local region-loss drill.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"

	_ "github.com/videngage/engagement"
	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/internal/localstack"
)

func main() {
	stopWithParent()
	region := flag.String("region", "", "serve one region of a REGIONS=2 stack, started by the stack itself")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	name, run := "local", realMain
	if *region != "" {
		log = log.With("region", *region)
		name, run = "local -region "+*region, localstack.ServeRegion
	}
	slog.SetDefault(log)
	cmdmain.Run(name, func(ctx context.Context) error {
		// An interrupt or SIGTERM is how the local stack stops.
		if err := run(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	})
}
