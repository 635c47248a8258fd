package spannerdb

import (
	"context"
	"os"

	"golang.org/x/sys/unix"
)

// lockRange takes the exclusive lock of byte offset of the file at path
// (created if need be), or gives up when ctx ends; the returned func
// releases it. The lock is an open file description's (OFD), so two
// goroutines of one process exclude each other as two processes do. A lock
// that arrives after the caller gave up is released at once.
func lockRange(ctx context.Context, path string, offset int64) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: offset, Len: 1}
	got := make(chan error, 1)
	go func() {
		for {
			err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLKW, &lk)
			if err != unix.EINTR {
				got <- err
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, err
		}
		return func() { f.Close() }, nil // closing the description releases its lock
	case <-ctx.Done():
		go func() {
			<-got
			f.Close()
		}()
		return nil, ctx.Err()
	}
}
