// Command replay re-drives the events that Pub/Sub dead-lettered, once the
// fault that made their consumer refuse them is fixed: it pulls them from
// the topic's dead-letter subscription (<topic>-dead-sub), republishes each
// to the topic and acknowledges it only after Pub/Sub accepted the copy
// (cmd/internal/replay). The consumers are idempotent, so a copy that
// reaches a consumer which had applied the message already changes nothing.
//
// It talks to Pub/Sub with the functions' own client: the project is
// GOOGLE_CLOUD_PROJECT, and PUBSUB_EMULATOR_HOST, when set, points it at
// the emulator. Runbook: docs/operations.md, "Replaying dead-lettered
// events".
//
// Usage: go run ./cmd/replay [-topic history-events] [-dry-run] [-limit 1000]
// [-batch 100] [-max-age 144h] [-ack-poison]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"cloud.google.com/go/pubsub/v2"

	"github.com/videngage/engagement/cmd/internal/cmdmain"
	"github.com/videngage/engagement/cmd/internal/replay"
	"github.com/videngage/engagement/shared/config"
	"github.com/videngage/engagement/shared/topology"
)

func main() { cmdmain.Run("replay", realMain) }

func realMain(ctx context.Context) error {
	o := replay.Options{Out: os.Stdout}
	topics := flag.String("topic", "history-events", "source topics whose dead letters are replayed, comma-separated: "+strings.Join(replay.Replayable, ", "))
	flag.BoolVar(&o.DryRun, "dry-run", false, "say what would be republished; leave every message")
	flag.IntVar(&o.Limit, "limit", 1000, "messages taken per topic in this run at most")
	flag.IntVar(&o.Batch, "batch", 100, "messages pulled and republished at once")
	flag.DurationVar(&o.MaxAge, "max-age", replay.DefaultMaxAge, "leave events accepted longer ago (a consumer remembers an applied event for 7 days)")
	flag.BoolVar(&o.AckPoison, "ack-poison", false, "acknowledge messages no consumer can ever apply (the subscription retains them for seeking)")
	flag.Parse()
	if o.Limit < 1 || o.Batch < 1 || o.MaxAge <= 0 {
		return errors.New("want -limit ≥ 1, -batch ≥ 1, -max-age > 0")
	}
	cfg, err := config.FromEnv(ctx)
	if err != nil {
		return err
	}
	top, err := topology.Load()
	if err != nil {
		return err
	}
	c, err := pubsub.NewClient(ctx, cfg.Project)
	if err != nil {
		return fmt.Errorf("pubsub: %w", err)
	}
	defer c.Close()
	failed := 0
	for _, t := range strings.Split(*topics, ",") {
		o.Topic = strings.TrimSpace(t)
		rep, err := replay.Run(ctx, c, top.PubSub, o)
		if err != nil {
			return err
		}
		failed += rep.Failed
	}
	if failed > 0 {
		return fmt.Errorf("%d messages not replayed; they are still dead-lettered: run again", failed)
	}
	return nil
}
