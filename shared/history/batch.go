package history

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxBatch bounds the watches of one message on the history topic.
const MaxBatch = 500

// Batch is one message on the history topic: the watches History accepted
// together (group commit), under one id. The id is drawn once, when the
// batch is formed, so every delivery or re-publish of the message carries
// it: a watch's view is counted by the first batch that claimed the watch,
// once, whichever batch or delivery comes first (see ApplyViews).
type Batch struct {
	ID      string  `json:"batchId"`
	Watches []Watch `json:"watches"`
}

// MaxBatchIDLength bounds a batch id (a single-watch message's id is its
// watch's event id).
const MaxBatchIDLength = 64

// NewBatch returns a batch of ws under a new random id; a batch of one
// watch is named by the watch's event id, so that a client's retry sent
// alone is the same batch (one message a watch, as before batches).
func NewBatch(ws []Watch) Batch {
	if len(ws) == 1 {
		return Batch{ID: ws[0].EventID, Watches: ws}
	}
	var b [16]byte
	rand.Read(b[:])
	return Batch{ID: "wb-" + hex.EncodeToString(b[:]), Watches: ws}
}

// Encode is the wire form of the batch.
func (b Batch) Encode() ([]byte, error) { return json.Marshal(b) }

// DecodeBatch decodes and validates a message of the history topic: a batch,
// or a single watch (the form published before batches, still accepted while
// such messages may be in flight), which is a batch of one whose id is the
// watch's event id. An error means the message can never be applied.
func DecodeBatch(data []byte) (Batch, error) {
	var probe struct {
		ID      *string         `json:"batchId"`
		Watches json.RawMessage `json:"watches"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return Batch{}, fmt.Errorf("history.DecodeBatch: %w", err)
	}
	if probe.ID == nil {
		w, err := DecodeWatch(data)
		if err != nil {
			return Batch{}, err
		}
		return Batch{ID: w.EventID, Watches: []Watch{w}}, nil
	}
	var b Batch
	if err := json.Unmarshal(data, &b); err != nil {
		return Batch{}, fmt.Errorf("history.DecodeBatch: %w", err)
	}
	if b.ID == "" || len(b.ID) > MaxBatchIDLength || !utf8.ValidString(b.ID) {
		return Batch{}, fmt.Errorf("history.DecodeBatch: bad batch id")
	}
	if len(b.Watches) == 0 || len(b.Watches) > MaxBatch {
		return Batch{}, fmt.Errorf("history.DecodeBatch: %d watches, want 1 to %d", len(b.Watches), MaxBatch)
	}
	for i, w := range b.Watches {
		if err := w.validate(); err != nil {
			return Batch{}, fmt.Errorf("history.DecodeBatch: watch %d: %w", i, err)
		}
		b.Watches[i].WatchedAt = w.WatchedAt.UTC().Truncate(time.Millisecond)
	}
	return b, nil
}

// ViewerHasher makes the 64-bit hash of a user id that the unique-viewers
// sketch takes: uniform, as HyperLogLog needs, and no user id in the
// counter store. It is keyed (HMAC-SHA-256 under a secret,
// VIEWER_HASH_KEY): an unkeyed hash of a user id can be computed by anyone
// who knows or guesses the id, and then looked for in the sketches.
type ViewerHasher struct{ key []byte }

// NewViewerHasher hashes under key.
func NewViewerHasher(key string) ViewerHasher { return ViewerHasher{key: []byte(key)} }

// Hash is the viewer hash of userID.
func (v ViewerHasher) Hash(userID string) uint64 {
	m := hmac.New(sha256.New, v.key)
	m.Write([]byte(userID))
	return binary.BigEndian.Uint64(m.Sum(nil)[:8])
}
