//go:build !linux

package ring

import "github.com/sluice-io/sluice/internal/runner/uring"

func probe() ProbeResult {
	err := &uring.NotSupportedError{Op: "setup", Reason: "io_uring needs Linux"}
	return ProbeResult{Reason: err.Reason, Err: err}
}
