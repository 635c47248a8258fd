//go:build !unix

package telemetry

import "time"

// processCPU is not measured off unix: the instrument has no point.
func processCPU() (time.Duration, bool) { return 0, false }
