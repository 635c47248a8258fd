package lazy

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

type thing struct{ released atomic.Bool }

func TestRetriesAfterFailure(t *testing.T) {
	var builds atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	const retryAfter = 50 * time.Millisecond
	v := &Value[*thing]{Name: "thing", RetryAfter: retryAfter, Build: func(context.Context) (*thing, error) {
		builds.Add(1)
		if fail.Load() {
			return nil, errors.New("no credentials")
		}
		return &thing{}, nil
	}}
	ctx := context.Background()
	if _, err := v.Get(ctx); err == nil || err.Error() != "thing: no credentials" {
		t.Fatalf("first Get: %v, want the build failure", err)
	}
	// Within RetryAfter, Get answers without another try.
	for range 3 {
		if _, err := v.Get(ctx); !errors.Is(err, ErrWaiting) {
			t.Fatalf("Get while waiting: %v, want ErrWaiting", err)
		}
	}
	if builds.Load() != 1 {
		t.Fatalf("%d builds, want 1", builds.Load())
	}
	// Once RetryAfter has passed, the next Get tries again.
	fail.Store(false)
	time.Sleep(retryAfter)
	first, err := v.Get(ctx)
	if err != nil {
		t.Fatalf("Get after the retry delay: %v", err)
	}
	again, err := v.Get(ctx)
	if err != nil || again != first {
		t.Fatalf("second Get = %p, %v; want the value built, %p", again, err, first)
	}
	if builds.Load() != 2 {
		t.Errorf("%d builds, want 2", builds.Load())
	}
	if x, ok := v.Close(); !ok || x != first {
		t.Errorf("Close = %p, %v; want the value built, %p", x, ok, first)
	}
	if _, err := v.Get(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
}

// A zero RetryAfter tries a failed build again on the next Get.
func TestZeroRetryAfterRetriesAtOnce(t *testing.T) {
	calls := 0
	v := &Value[int]{Build: func(context.Context) (int, error) {
		calls++
		if calls == 1 {
			return 0, errors.New("backend down")
		}
		return 42, nil
	}}
	if _, err := v.Get(context.Background()); err == nil || err.Error() != "backend down" {
		t.Fatalf("first Get: %v, want the build error unprefixed", err)
	}
	if x, err := v.Get(context.Background()); err != nil || x != 42 {
		t.Fatalf("second Get = %d, %v; want 42", x, err)
	}
	if calls != 2 {
		t.Errorf("build ran %d times, want 2", calls)
	}
}

// A build that hangs holds up only the Get that waits for it, up to that
// Get's deadline; one build runs at a time, and its value is used once it
// is there.
func TestSlowBuild(t *testing.T) {
	release := make(chan struct{})
	var builds atomic.Int32
	built := &thing{}
	v := &Value[*thing]{Build: func(context.Context) (*thing, error) {
		builds.Add(1)
		<-release
		return built, nil
	}}
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := v.Get(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Get during a hung build: %v, want its deadline", err)
		}
	}
	close(release)
	got, err := v.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got != built || builds.Load() != 1 {
		t.Errorf("got %p after %d builds, want %p after 1", got, builds.Load(), built)
	}
}

// The cancellation of the Get that starts a build does not reach the build.
func TestBuildOutlivesTheCaller(t *testing.T) {
	v := &Value[context.Context]{Build: func(ctx context.Context) (context.Context, error) { return ctx, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	got, err := v.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if got.Err() != nil {
		t.Error("the build context was cancelled with the caller's")
	}
}

// A value built after Close goes to Release, not to use.
func TestCloseDuringBuild(t *testing.T) {
	release := make(chan struct{})
	built := &thing{}
	v := &Value[*thing]{
		Build:   func(context.Context) (*thing, error) { <-release; return built, nil },
		Release: func(x *thing) { x.released.Store(true) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, _ = v.Get(ctx)
	cancel()
	if _, ok := v.Close(); ok {
		t.Fatal("Close during the build returned a value")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for !built.released.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !built.released.Load() {
		t.Error("the value built after Close was not released")
	}
	if _, ok := v.Peek(); ok {
		t.Error("the value built after Close is in use")
	}
}
