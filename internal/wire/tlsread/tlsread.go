// Package tlsread reads a TLS session for a source: plaintext staged by a
// wait (Reader), and the wait itself as the syscall.RawConn a runner
// waits on before it takes a pool buffer (Wait), for srcs's connections
// and the MQTT source alike. It touches the session only through
// io.Reader, so that it links no TLS.
package tlsread

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/sluice-io/sluice/internal/contract"
)

// firstRead is how much plaintext a wait for a TLS session's next bytes
// reads: about a log line, so that a message that arrives alone costs one
// decrypting read, and little beside the record buffer crypto/tls keeps
// for every session.
const firstRead = 512

// Reader reads a TLS session for a source, with the plaintext a wait
// staged (see Wait) first. It is owned by the source's reading goroutine.
type Reader struct {
	tc io.Reader // the session: a *tls.Conn
	// stage[off:] is plaintext a wait read and Read has not returned yet,
	// and err the error that came with it.
	stage []byte
	off   int
	err   error
}

// NewReader returns a Reader of the session tc (a *tls.Conn).
func NewReader(tc io.Reader) *Reader { return &Reader{tc: tc} }

// Read returns the staged plaintext, alone, since more may not come soon,
// and then reads the session.
func (r *Reader) Read(p []byte) (int, error) {
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
// the next bytes, up to firstRead, into the stage. An error that came
// with no byte is returned: the session is over, or the read deadline
// passed.
func (r *Reader) wait() error {
	if r.off < len(r.stage) {
		return nil
	}
	if r.stage == nil {
		r.stage = make([]byte, 0, firstRead)
	}
	n, err := r.tc.Read(r.stage[:cap(r.stage)])
	r.stage, r.off = r.stage[:n], 0
	if n == 0 {
		return err
	}
	r.err = err
	return nil
}

// Wait is the syscall.RawConn of a TLS session, for a runner that waits
// for a source's next bytes before it takes a pool buffer (the goroutine
// runner), so that an idle session holds none. Waiting for the socket to
// be readable would be wrong both ways: the ciphertext that makes it
// readable may hold no plaintext (a handshake message, part of a record),
// and plaintext crypto/tls has decrypted already makes nothing readable.
// So Read waits for plaintext instead (Reader.wait) and returns without
// calling f: the source's next Read returns those bytes. Like the source's
// Read it honours the read deadline, by which a runner interrupts it, and
// it returns the error that ends the session when no byte came with it.
// Control reaches the socket, for socket options; Write is not offered.
type Wait struct {
	R    *Reader
	Raw  net.Conn // the socket under the session
	Name string   // the source's name, for errors
}

func (w Wait) Read(func(fd uintptr) bool) error { return w.R.wait() }

func (w Wait) Control(f func(fd uintptr)) error {
	sc, ok := w.Raw.(syscall.Conn)
	if !ok {
		return fmt.Errorf("srcs: %s: %w", w.Name, contract.ErrNoDescriptor)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(f)
}

func (w Wait) Write(func(fd uintptr) bool) error {
	return fmt.Errorf("srcs: %s: a TLS session is written through crypto/tls: %w", w.Name, errors.ErrUnsupported)
}

var _ syscall.RawConn = Wait{}
