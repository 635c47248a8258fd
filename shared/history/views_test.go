package history

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

func TestViewWindow(t *testing.T) {
	const window = 30 * time.Minute
	recv := time.Date(2026, 3, 4, 10, 29, 59, 999e6, time.UTC)
	w := NewWatch("u", "v", recv, 0)
	w.RecordedAt = recv
	for _, c := range []struct {
		dated time.Duration
		want  bool
	}{
		{0, true}, {window, true}, {window + time.Millisecond, false},
		{-MaxFuture, true}, {recv.Sub(time.UnixMilli(1)), false},
	} {
		w.WatchedAt = recv.Add(-c.dated)
		if got := CountsAsView(w, window); got != c.want {
			t.Errorf("dated %v before its receipt: CountsAsView %v, want %v", c.dated, got, c.want)
		}
	}
	// A watch that does not say when it was received (published before
	// receipts were recorded) is judged by its watch time.
	old := Watch{WatchedAt: recv}
	if !CountsAsView(old, window) || !old.AcceptedAt().Equal(recv) {
		t.Error("a watch without a receipt time")
	}
}

// The viewer hash is keyed: the same user hashes alike under one key, apart
// under another, and never as the unkeyed SHA-256 anyone could compute.
func TestViewerHasherIsKeyed(t *testing.T) {
	a, b := NewViewerHasher("key-a"), NewViewerHasher("key-b")
	if a.Hash("alice") != a.Hash("alice") {
		t.Error("the same user hashes differently under one key")
	}
	if a.Hash("alice") == a.Hash("bob") {
		t.Error("two users hash alike")
	}
	if a.Hash("alice") == b.Hash("alice") {
		t.Error("the hash does not depend on the key")
	}
	unkeyed := sha256.Sum256([]byte("alice"))
	for _, h := range []ViewerHasher{a, b, NewViewerHasher("")} {
		if h.Hash("alice") == binary.BigEndian.Uint64(unkeyed[:8]) {
			t.Error("the hash is the unkeyed SHA-256 of the user id")
		}
	}
}
