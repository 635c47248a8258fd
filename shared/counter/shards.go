package counter

import (
	"time"
)

// Shard counts of a counter: cold counters have MinShards, the hottest MaxShards.
const (
	MinShards = 4
	MaxShards = 64
)

// ShardPolicy chooses a counter's shard count from its measured write rate.
type ShardPolicy struct {
	// WritesPerShard is the commit rate (per second) one shard row is meant
	// to take; above it the contention on the row costs latency and aborts.
	WritesPerShard float64
	// MinWindow is the shortest measuring window: a rate over a shorter one
	// is a burst, not a rate.
	MinWindow time.Duration
}

// NewShardPolicy keeps each shard row at or below writesPerShard commits/s
// (COUNTER_SHARD_WRITES_PER_SECOND), measured over a second at least.
func NewShardPolicy(writesPerShard float64) ShardPolicy {
	return ShardPolicy{WritesPerShard: writesPerShard, MinWindow: time.Second}
}

// Rate is the write rate of writes commits over elapsed.
func (p ShardPolicy) Rate(writes int64, elapsed time.Duration) float64 {
	if elapsed < p.MinWindow {
		elapsed = p.MinWindow
	}
	if elapsed <= 0 {
		elapsed = time.Second
	}
	return float64(writes) / elapsed.Seconds()
}

// Want is the smallest power-of-two shard count in [MinShards, MaxShards]
// that keeps each shard at or below WritesPerShard at rate; MaxShards when
// WritesPerShard is not positive.
func (p ShardPolicy) Want(rate float64) int {
	per := p.WritesPerShard
	if !(per > 0) {
		return MaxShards
	}
	n := MinShards
	for n < MaxShards && float64(n)*per < rate {
		n *= 2
	}
	return n
}

// Next is the shard count after a fold that measured writes commits over
// elapsed while the counter had current shards. It rises at once to what the
// rate needs, and falls by at most half per fold, so that a short lull does
// not undo the spreading of a counter that is still hot.
func (p ShardPolicy) Next(current int, writes int64, elapsed time.Duration) int {
	current = min(max(current, MinShards), MaxShards)
	want := p.Want(p.Rate(writes, elapsed))
	if want >= current {
		return want
	}
	return max(want, current/2, MinShards)
}
