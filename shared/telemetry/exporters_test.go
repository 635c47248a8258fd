package telemetry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/videngage/engagement/shared/lazy"
)

type fakeExporter struct{ shut atomic.Bool }

func (f *fakeExporter) Shutdown(context.Context) error { f.shut.Store(true); return nil }

// An export while a failed build waits for its next try is dropped quietly;
// shutdown shuts the built exporter down.
func TestExportDropsWhileWaiting(t *testing.T) {
	var builds atomic.Int32
	fail := true
	l := lazyExporter("fake", func(context.Context) (*fakeExporter, error) {
		builds.Add(1)
		if fail {
			return nil, errors.New("no credentials")
		}
		return &fakeExporter{}, nil
	})
	ctx := context.Background()
	uses := 0
	use := func(*fakeExporter) error { uses++; return nil }

	if err := export(ctx, l, use); err == nil || err.Error() != "fake: no credentials" {
		t.Fatalf("first export: %v, want the build failure", err)
	}
	// Within rebuildAfter, exports are dropped without another try (and
	// without another log line).
	for range 3 {
		if err := export(ctx, l, use); err != nil {
			t.Fatalf("export while waiting: %v", err)
		}
	}
	if builds.Load() != 1 || uses != 0 {
		t.Fatalf("builds %d uses %d, want 1 and 0", builds.Load(), uses)
	}
	// Once the retry delay has passed, the next export tries again.
	fail = false
	l.RetryAfter = 0
	if err := export(ctx, l, use); err != nil {
		t.Fatalf("export after the retry delay: %v", err)
	}
	if err := export(ctx, l, use); err != nil {
		t.Fatal(err)
	}
	if builds.Load() != 2 || uses != 2 {
		t.Errorf("builds %d uses %d, want 2 and 2", builds.Load(), uses)
	}
	v, _ := l.Peek()
	if err := shutdown(ctx, l); err != nil || !v.shut.Load() {
		t.Errorf("shutdown: %v, exporter shut down %v", err, v.shut.Load())
	}
	if err := export(ctx, l, use); !errors.Is(err, lazy.ErrClosed) {
		t.Errorf("export after shutdown: %v", err)
	}
}

// An exporter finished after shutdown is shut down, not leaked.
func TestShutdownDuringBuild(t *testing.T) {
	release := make(chan struct{})
	built := &fakeExporter{}
	l := lazyExporter("fake", func(context.Context) (*fakeExporter, error) {
		<-release
		return built, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_ = export(ctx, l, func(*fakeExporter) error { return nil })
	cancel()
	if err := shutdown(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for !built.shut.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !built.shut.Load() {
		t.Error("the exporter built after shutdown was not shut down")
	}
	if _, ok := l.Peek(); ok {
		t.Error("the exporter built after shutdown is in use")
	}
}
