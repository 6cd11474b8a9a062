package uring

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNotSupportedMatchesErrUnsupported checks that every way ring says
// "not supported" matches errors.ErrUnsupported, as the rest of sluice's
// "not supported" errors do, and still matches ErrNotSupported and the
// errno behind it.
func TestNotSupportedMatchesErrUnsupported(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		errno error // the errno it must also match; nil for none
	}{
		{"sentinel", ErrNotSupported, nil},
		{"wrapped sentinel", fmt.Errorf("engine: %w", ErrNotSupported), nil},
		{"typed", &NotSupportedError{Op: "setup", Reason: "io_uring needs Linux"}, nil},
		{"typed with errno", &NotSupportedError{Op: "setup", Reason: "blocked", Err: unix.EPERM}, unix.EPERM},
		{"typed, wrapped", fmt.Errorf("engine: runner uring: %w", &NotSupportedError{Op: "runner", Reason: "old kernel"}), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, errors.ErrUnsupported) {
				t.Errorf("%v does not match errors.ErrUnsupported", tt.err)
			}
			if !errors.Is(tt.err, ErrNotSupported) {
				t.Errorf("%v does not match ErrNotSupported", tt.err)
			}
			if tt.errno != nil && !errors.Is(tt.err, tt.errno) {
				t.Errorf("%v does not match %v", tt.err, tt.errno)
			}
		})
	}
	if errors.Is(errors.ErrUnsupported, ErrNotSupported) {
		t.Error("errors.ErrUnsupported matches ErrNotSupported: any unsupported operation would read as io_uring missing")
	}
	if got := ErrNotSupported.Error(); got != "ring: io_uring not supported" {
		t.Errorf("ErrNotSupported says %q", got)
	}
}
