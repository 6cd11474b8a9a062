package contract

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// Classify maps a read error from any runner or source to the shared
// vocabulary, so that callers see the same typed errors whichever runner
// read the bytes: io.EOF stays io.EOF, resets also match reset
// (srcs.ErrReset), deadlines and timeouts also match timeout
// (srcs.ErrTimeout). Other errors pass through unchanged. srcs and
// internal/runner/driver bind it to srcs's sentinels.
func Classify(err, reset, timeout error) error {
	switch {
	case err == nil || errors.Is(err, io.EOF):
		return err
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return &wrapped{reset, err}
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return &wrapped{timeout, err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &wrapped{timeout, err}
	}
	return err
}

// wrapped is an error that is both a sentinel and its cause.
type wrapped struct {
	kind, cause error
}

func (w *wrapped) Error() string   { return w.kind.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.kind, w.cause} }
