package counter

// Correction is the delta that makes a counter equal its source of truth, on
// the fields that source owns. truth is the recount, counted what the
// snapshot and shards hold, pending the deltas written but not yet counted,
// all read at one timestamp: at that timestamp every change is either counted
// or pending, never both, so changes in flight cancel out and a right count
// gets a zero correction.
func Correction(truth, counted, pending Values, fields []Field) Values {
	return truth.Minus(counted).Minus(pending).Only(fields)
}
