package srcs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// tlsFirstRead is how much plaintext a wait for a TLS session's next bytes
// reads: about a log line, so that a message that arrives alone costs one
// decrypting read, and little beside the record buffer crypto/tls keeps
// for every session.
const tlsFirstRead = 512

// tlsReader reads a TLS session for a source, with the plaintext a wait
// staged (see tlsWait) first. It is owned by the source's reading
// goroutine.
type tlsReader struct {
	tc io.Reader // the session: a *tls.Conn
	// stage[off:] is plaintext a wait read and Read has not returned yet,
	// and err the error that came with it.
	stage []byte
	off   int
	err   error
}

// Read returns the staged plaintext, alone, since more may not come soon,
// and then reads the session.
func (r *tlsReader) Read(p []byte) (int, error) {
	if r.off == len(r.stage) {
		return r.tc.Read(p)
	}
	n := copy(p, r.stage[r.off:])
	r.off += n
	if r.off < len(r.stage) {
		return n, nil
	}
	err := r.err
	r.stage, r.off, r.err = r.stage[:0], 0, nil
	return n, err
}

// wait blocks until the session has plaintext to Read, or fails. It reads
// the next bytes, up to tlsFirstRead, into the stage. An error that came
// with no byte is returned: the session is over, or the read deadline
// passed.
func (r *tlsReader) wait() error {
	if r.off < len(r.stage) {
		return nil
	}
	if r.stage == nil {
		r.stage = make([]byte, 0, tlsFirstRead)
	}
	n, err := r.tc.Read(r.stage[:cap(r.stage)])
	r.stage, r.off = r.stage[:n], 0
	if n == 0 {
		return err
	}
	r.err = err
	return nil
}

// tlsWait is the syscall.RawConn of a TLS session, for a runner that waits
// for a source's next bytes before it takes a pool buffer (the goroutine
// runner), so that an idle session holds none. Waiting for the socket to
// be readable would be wrong both ways: the ciphertext that makes it
// readable may hold no plaintext (a handshake message, part of a record),
// and plaintext crypto/tls has decrypted already makes nothing readable.
// So Read waits for plaintext instead (tlsReader.wait) and returns without
// calling f: the source's next Read returns those bytes. Like the source's
// Read it honours the read deadline, by which a runner interrupts it, and
// it returns the error that ends the session when no byte came with it.
// Control reaches the socket, for socket options; Write is not offered.
type tlsWait struct {
	r    *tlsReader
	raw  net.Conn
	name string
}

func (w tlsWait) Read(func(fd uintptr) bool) error { return w.r.wait() }

func (w tlsWait) Control(f func(fd uintptr)) error {
	sc, ok := w.raw.(syscall.Conn)
	if !ok {
		return fmt.Errorf("srcs: %s: %w", w.name, ErrNoDescriptor)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(f)
}

func (w tlsWait) Write(func(fd uintptr) bool) error {
	return fmt.Errorf("srcs: %s: a TLS session is written through crypto/tls: %w", w.name, errors.ErrUnsupported)
}

var _ syscall.RawConn = tlsWait{}
