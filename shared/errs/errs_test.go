package errs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("boom"), false},
		{"sentinel", fmt.Errorf("x: %w", ErrBackendUnavailable), true},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"cancelled", context.Canceled, true},
		{"grpc unavailable", status.Error(codes.Unavailable, "down"), true},
		{"grpc unavailable, wrapped", fmt.Errorf("read: %w", status.Error(codes.Unavailable, "down")), true},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, ""), true},
		{"grpc aborted", status.Error(codes.Aborted, ""), true},
		{"grpc exhausted", status.Error(codes.ResourceExhausted, ""), true},
		{"grpc canceled", status.Error(codes.Canceled, ""), true},
		{"grpc internal", status.Error(codes.Internal, ""), false},
		{"grpc invalid argument", status.Error(codes.InvalidArgument, ""), false},
		{"grpc not found", status.Error(codes.NotFound, ""), false},
		{"grpc permission denied", status.Error(codes.PermissionDenied, ""), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestBackend(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	err := Backend("read x", down)
	if !errors.Is(err, ErrBackendUnavailable) || !errors.Is(err, down) {
		t.Errorf("Backend(transient) = %v; want it to wrap ErrBackendUnavailable and the cause", err)
	}
	bug := status.Error(codes.InvalidArgument, "bad row key")
	err = Backend("read x", bug)
	if errors.Is(err, ErrBackendUnavailable) || !errors.Is(err, bug) {
		t.Errorf("Backend(bug) = %v; want the cause without ErrBackendUnavailable", err)
	}
}

func TestUnavailable(t *testing.T) {
	bug := status.Error(codes.InvalidArgument, "message too large")
	err := Unavailable("publish", bug)
	if !errors.Is(err, ErrBackendUnavailable) || !errors.Is(err, bug) {
		t.Errorf("Unavailable(bug) = %v; want it to wrap ErrBackendUnavailable and the cause", err)
	}
	if s, ok := status.FromError(err); !ok || s.Code() != codes.InvalidArgument {
		t.Errorf("status.FromError(Unavailable(bug)) = %v, %v; want the cause's status through the chain", s, ok)
	}
}
