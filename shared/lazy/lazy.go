// Package lazy holds a value built on first use, such as a client or an
// exporter whose construction may wait on the network: a build that fails is
// tried again later instead of staying failed, and a build that hangs holds
// up only the callers that wait for it, each until its own context ends.
package lazy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrWaiting is the answer of Get within RetryAfter of a failed build.
var ErrWaiting = errors.New("lazy: not built; waiting to try again")

// ErrClosed is the answer of Get after Close.
var ErrClosed = errors.New("lazy: closed")

// Value is a T built by Build on first use. One build runs at a time, in
// the background on a context that outlives the caller's; a build that
// failed is tried again by the first Get at least RetryAfter after it.
type Value[T any] struct {
	// Name prefixes the errors of Get; empty adds nothing.
	Name string
	// Build builds the value. Its context keeps the values of the context of
	// the Get that started it, without its cancellation.
	Build func(context.Context) (T, error)
	// RetryAfter is how long after a failed build the next one may start;
	// zero tries again on the next Get.
	RetryAfter time.Duration
	// Release, if set, receives a value whose build ended after Close.
	Release func(T)

	mu       sync.Mutex
	value    T
	built    bool
	building chan struct{} // closed when the build in flight ends
	err      error         // of the last build
	failedAt time.Time
	closed   bool
}

// Get returns the value, starting a build if none is done or running and
// one is due, and waits for the build until ctx ends.
func (v *Value[T]) Get(ctx context.Context) (T, error) {
	var zero T
	v.mu.Lock()
	switch {
	case v.built:
		x := v.value
		v.mu.Unlock()
		return x, nil
	case v.closed:
		v.mu.Unlock()
		return zero, ErrClosed
	}
	wait := v.building
	if wait == nil {
		if !v.failedAt.IsZero() && time.Since(v.failedAt) < v.RetryAfter {
			v.mu.Unlock()
			return zero, ErrWaiting
		}
		wait = make(chan struct{})
		v.building = wait
		go v.run(context.WithoutCancel(ctx), wait)
	}
	v.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return zero, v.wrap(fmt.Errorf("still being built: %w", ctx.Err()))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.built:
		return v.value, nil
	case v.closed:
		return zero, ErrClosed
	}
	return zero, v.err
}

func (v *Value[T]) run(ctx context.Context, done chan struct{}) {
	x, err := v.Build(ctx)
	v.mu.Lock()
	defer close(done)
	defer v.mu.Unlock()
	v.building = nil
	switch {
	case err != nil:
		v.err = v.wrap(err)
		v.failedAt = time.Now()
	case v.closed:
		// Closed while it was being built: nobody will use it.
		if v.Release != nil {
			go v.Release(x)
		}
	default:
		v.value, v.built = x, true
	}
}

func (v *Value[T]) wrap(err error) error {
	if v.Name == "" {
		return err
	}
	return fmt.Errorf("%s: %w", v.Name, err)
}

// Peek returns the value if it has been built, without building it.
func (v *Value[T]) Peek() (T, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.value, v.built
}

// Close ends the use of the value: Get answers ErrClosed from now on. It
// returns the value, if one was built, for the caller to release; a build
// still running ends in Release.
func (v *Value[T]) Close() (T, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	x, built := v.value, v.built
	var zero T
	v.value, v.built = zero, false
	return x, built
}
