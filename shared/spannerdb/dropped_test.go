package spannerdb

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The emulator's answers for a transaction it dropped are told apart from
// the same codes for other causes, which must not run a transaction again.
func TestEmulatorDropped(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.FailedPrecondition, "Invalid transaction ID. Transaction: 7 is not found."), true},
		{fmt.Errorf("commit: %w", status.Error(codes.NotFound, "Transaction not found")), true},
		{status.Error(codes.FailedPrecondition, "Cloud Spanner does not support nested transactions"), false},
		{status.Error(codes.NotFound, "Table not found: Nope"), false},
		{status.Error(codes.Aborted, "Invalid transaction ID"), false}, // Aborted: the client's own retry
		{errors.New("Invalid transaction ID"), false},
		{nil, false},
	} {
		if got := emulatorDropped(tc.err); got != tc.want {
			t.Errorf("emulatorDropped(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
