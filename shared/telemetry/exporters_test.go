package telemetry

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type fakeExporter struct{ shut atomic.Bool }

func (f *fakeExporter) Shutdown(context.Context) error { f.shut.Store(true); return nil }

func TestLazyRetriesAfterFailure(t *testing.T) {
	var builds atomic.Int32
	fail := true
	l := &lazy[*fakeExporter]{name: "fake", build: func(context.Context) (*fakeExporter, error) {
		builds.Add(1)
		if fail {
			return nil, errors.New("no credentials")
		}
		return &fakeExporter{}, nil
	}}
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
	// Once rebuildAfter has passed, the next export tries again.
	fail = false
	l.mu.Lock()
	l.failedAt = time.Now().Add(-rebuildAfter)
	l.mu.Unlock()
	if err := export(ctx, l, use); err != nil {
		t.Fatalf("export after the retry delay: %v", err)
	}
	if err := export(ctx, l, use); err != nil {
		t.Fatal(err)
	}
	if builds.Load() != 2 || uses != 2 {
		t.Errorf("builds %d uses %d, want 2 and 2", builds.Load(), uses)
	}
	v, _ := l.peek()
	if err := l.shutdown(ctx); err != nil || !v.shut.Load() {
		t.Errorf("shutdown: %v, exporter shut down %v", err, v.shut.Load())
	}
	if err := export(ctx, l, use); !errors.Is(err, errShutdown) {
		t.Errorf("export after shutdown: %v", err)
	}
}

// TestLazySlowBuild: a build that hangs (metadata server, network) holds up
// only the export that waits for it, up to that export's deadline; one build
// runs at a time, and its exporter is used once it is there.
func TestLazySlowBuild(t *testing.T) {
	release := make(chan struct{})
	var builds atomic.Int32
	built := &fakeExporter{}
	l := &lazy[*fakeExporter]{name: "fake", build: func(context.Context) (*fakeExporter, error) {
		builds.Add(1)
		<-release
		return built, nil
	}}
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := export(ctx, l, func(*fakeExporter) error { return nil })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("export during a hung build: %v, want its deadline", err)
		}
	}
	close(release)
	var got *fakeExporter
	if err := export(context.Background(), l, func(e *fakeExporter) error { got = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if got != built || builds.Load() != 1 {
		t.Errorf("used %p after %d builds, want %p after 1", got, builds.Load(), built)
	}
}

// TestLazyShutdownDuringBuild: an exporter finished after shutdown is shut
// down, not leaked.
func TestLazyShutdownDuringBuild(t *testing.T) {
	release := make(chan struct{})
	built := &fakeExporter{}
	l := &lazy[*fakeExporter]{name: "fake", build: func(context.Context) (*fakeExporter, error) {
		<-release
		return built, nil
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_ = export(ctx, l, func(*fakeExporter) error { return nil })
	cancel()
	if err := l.shutdown(context.Background()); err != nil {
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
	if _, ok := l.peek(); ok {
		t.Error("the exporter built after shutdown is in use")
	}
}
