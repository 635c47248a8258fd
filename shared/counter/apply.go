package counter

// ApplyStats says what one counting of events did (outboxstore.Store.Apply).
type ApplyStats struct {
	Applied    int // events counted now
	Duplicates int // events already counted (redelivery, replay, re-publish)
	Counters   int // counter rows written
	Commits    int // read-write transactions
	// Counted is the deltas counted now, summed over the counters (an
	// outbox row's sum of many changes included whole).
	Counted Values
}
