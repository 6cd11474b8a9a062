package driver

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// ReadResult is what one read or receive of a lane brought, in the terms
// every runner that reads descriptors acts on (Result).
type ReadResult uint8

const (
	// ReadData: bytes arrived (for a datagram lane, a datagram, which may
	// be empty): commit them.
	ReadData ReadResult = iota + 1
	// ReadDrained: nothing to read now (EAGAIN): wait for readiness.
	ReadDrained
	// ReadAgain: interrupted (EINTR, or an operation cancelled while the
	// lane goes on): read again.
	ReadAgain
	// ReadEnd: a stream's end, zero bytes.
	ReadEnd
	// ReadFailed: an error that ends the lane (ReadError).
	ReadFailed
)

// Result classifies a read of n bytes that failed with errno (0: none),
// on a datagram lane or not, the same for every runner.
func Result(n int, errno unix.Errno, datagram bool) ReadResult {
	switch errno {
	case 0:
	case unix.EAGAIN:
		return ReadDrained
	case unix.EINTR, unix.ECANCELED:
		return ReadAgain
	default:
		return ReadFailed
	}
	if n == 0 && !datagram {
		return ReadEnd
	}
	return ReadData
}

// ReadError is the error a lane ends with when its read, the system call
// op, failed with errno: typed as Classify types it.
func ReadError(op string, errno unix.Errno) error {
	return Classify(os.NewSyscallError(op, errno))
}

// Classify maps a read error from any runner to srcs's vocabulary, so
// that callers see the same typed errors whichever runner read the bytes:
// io.EOF stays io.EOF, resets wrap srcs.ErrReset, deadlines and timeouts
// wrap srcs.ErrTimeout. Other errors pass through unchanged.
func Classify(err error) error { return contract.Classify(err, srcs.ErrReset, srcs.ErrTimeout) }

// Errno returns the errno of a system call's error: 0 for none, and
// unix.EIO for an error that carries none.
func Errno(err error) unix.Errno {
	if err == nil {
		return 0
	}
	if e, ok := err.(unix.Errno); ok {
		return e
	}
	return unix.EIO
}
