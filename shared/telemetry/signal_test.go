//go:build unix

package telemetry

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartInstanceFlushesOnSIGTERM runs a child process that starts
// telemetry as a deployed function does (stdout exporter), records a span and
// a metric, and gets SIGTERM as Cloud Run sends it: the child must write
// both before the signal ends it.
func TestStartInstanceFlushesOnSIGTERM(t *testing.T) {
	if os.Getenv("TELEMETRY_SIGTERM_CHILD") == "1" {
		sigtermChild()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStartInstanceFlushesOnSIGTERM$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TELEMETRY_SIGTERM_CHILD=1", "TELEMETRY_EXPORTER=stdout", "TELEMETRY_SAMPLE_RATIO=1",
		"FUNCTION_TARGET=ApplyCounters")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want it ended by SIGTERM\n%s", err, out)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("child ended with %v, want by SIGTERM\n%s", exit, out)
	}
	for _, want := range []string{`"Name":"child-span"`, MetricDeadLetterDeliveries, `"Value":"ApplyCounters"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child's output lacks %s:\n%s", want, out)
		}
	}
}

func sigtermChild() {
	ctx := context.Background()
	cfg := telemetryConfig(ExporterStdout)
	if err := StartInstance(ctx, cfg); err != nil {
		os.Exit(2)
	}
	_, span := tracer().Start(ctx, "child-span")
	span.End()
	m, err := NewMetrics(nil)
	if err != nil {
		os.Exit(2)
	}
	m.DeadLetterDelivery(ctx, "ApplyHistory")
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	time.Sleep(20 * time.Second)
	os.Exit(3) // the signal did not end the process
}
