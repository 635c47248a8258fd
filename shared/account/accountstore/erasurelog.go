package accountstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/videngage/engagement/shared/account"
	"github.com/videngage/engagement/shared/errs"
	"github.com/videngage/engagement/shared/objects"
)

// Objects is the bucket the erasure log is kept in (*objects.Bucket).
type Objects interface {
	Write(ctx context.Context, name, contentType string) *objects.Writer
	Read(ctx context.Context, name string) (io.ReadCloser, error)
	List(ctx context.Context, prefix string) ([]objects.Object, error)
}

// ErasureLog is the erasure log (account.LogEntry): one small object per
// erasure asked for, in a bucket of its own whose retention policy keeps
// every object, unchanged, for as long as a backup may still be restored
// (Terraform: erasurelog.tf). Objects are only ever created.
type ErasureLog struct {
	objects Objects
	now     func() time.Time
}

// NewErasureLog returns the log kept in objects.
func NewErasureLog(objects Objects) *ErasureLog {
	return &ErasureLog{objects: objects, now: time.Now}
}

// Append records that the user's erasure was asked for at at.
func (l *ErasureLog) Append(ctx context.Context, userID string, at time.Time) error {
	data, err := account.LogEntry{UserID: userID, RequestTime: at}.Encode()
	if err != nil {
		return fmt.Errorf("accountstore.ErasureLog.Append: %w", err)
	}
	var suffix [8]byte
	rand.Read(suffix[:])
	w := l.objects.Write(ctx, account.LogObjectName(at, hex.EncodeToString(suffix[:])), "application/json")
	if _, err := w.Write(data); err != nil {
		w.Close()
		return errs.Unavailable("accountstore.ErasureLog.Append", err)
	}
	if err := w.Close(); err != nil {
		return errs.Unavailable("accountstore.ErasureLog.Append", err)
	}
	return nil
}

// Since returns the entries of the erasures asked for at or after since
// (the whole log when since is zero), oldest first. It lists the days from
// since's to tomorrow's (a writer's clock may run ahead) and reads only the
// objects whose name says they are recent enough.
func (l *ErasureLog) Since(ctx context.Context, since time.Time) ([]account.LogEntry, error) {
	prefixes := []string{account.LogPrefix}
	if !since.IsZero() {
		prefixes = account.LogDayPrefixes(since, l.now().Add(24*time.Hour))
	}
	var out []account.LogEntry
	for _, p := range prefixes {
		objs, err := l.objects.List(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("accountstore.ErasureLog.Since: list %s: %w", p, err)
		}
		for _, o := range objs {
			name := o.Name
			t, err := account.LogObjectTime(name)
			if err != nil {
				return nil, fmt.Errorf("accountstore.ErasureLog.Since: %w", err)
			}
			if t.Before(since) {
				continue
			}
			data, err := l.read(ctx, name)
			if err != nil {
				return nil, fmt.Errorf("accountstore.ErasureLog.Since: read %s: %w", name, err)
			}
			e, err := account.DecodeLogEntry(data)
			if err != nil {
				return nil, fmt.Errorf("accountstore.ErasureLog.Since: %s: %w", name, err)
			}
			out = append(out, e)
		}
	}
	slices.SortStableFunc(out, func(a, b account.LogEntry) int { return a.RequestTime.Compare(b.RequestTime) })
	return out, nil
}

// maxEntryBytes bounds what is read of one entry: a user id of at most
// account.MaxUserIDBytes and a time.
const maxEntryBytes = 4096

func (l *ErasureLog) read(ctx context.Context, name string) ([]byte, error) {
	r, err := l.objects.Read(ctx, name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, maxEntryBytes))
}
