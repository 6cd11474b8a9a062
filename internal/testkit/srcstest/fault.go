package srcstest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/sluice-io/sluice/srcs"
)

// Faults says what Faulty injects. The zero value injects nothing.
type Faults struct {
	// FailOpens makes the first FailOpens calls to Open fail with OpenErr
	// without opening the wrapped source.
	FailOpens int
	// OpenErr is the injected Open error; nil means an error wrapping
	// syscall.ECONNREFUSED.
	OpenErr error
	// MaxRead caps every Read at MaxRead bytes, to exercise short reads.
	// Zero means no cap.
	MaxRead int
	// ReadErr, when set, is returned once ErrAfter bytes have been read
	// in total, counted over all sessions: the Read that reaches ErrAfter
	// is cut short there and succeeds, and every later Read of that
	// session returns ReadErr. The fault fires once; the next session (Open)
	// reads normally. Use an error wrapping syscall.ECONNRESET to model a
	// reset.
	ReadErr  error
	ErrAfter int64
}

// Faulty wraps src so that it fails as f says. It is meant for the
// goroutine runner, which reads through Read: the wrapper hides src's
// Descriptor (and Repeater), so that a descriptor runner cannot bypass
// the faults. It keeps src's Deadliner and Reconnector capabilities.
//
// The wrapper has src's concurrency rules: Close and SetReadDeadline may
// be called while Read blocks; nothing else concurrently.
func Faulty(src srcs.Source, f Faults) srcs.Source {
	if f.OpenErr == nil {
		f.OpenErr = fmt.Errorf("srcstest: injected open failure: %w", syscall.ECONNREFUSED)
	}
	w := &faulty{src: src, f: f}
	d, isD := src.(srcs.Deadliner)
	r, isR := src.(srcs.Reconnector)
	switch {
	case isD && isR:
		return &struct {
			*faulty
			srcs.Deadliner
			srcs.Reconnector
		}{w, d, r}
	case isD:
		return &struct {
			*faulty
			srcs.Deadliner
		}{w, d}
	case isR:
		return &struct {
			*faulty
			srcs.Reconnector
		}{w, r}
	}
	return w
}

type faulty struct {
	src srcs.Source
	f   Faults

	mu     sync.Mutex
	opens  int   // Open calls so far
	read   int64 // bytes returned by Read, over all sessions
	fired  bool  // ReadErr has been returned
	failed bool  // the current session returns ReadErr
}

func (s *faulty) Name() string { return s.src.Name() }

func (s *faulty) Open(ctx context.Context) error {
	s.mu.Lock()
	s.opens++
	fail := s.opens <= s.f.FailOpens
	s.failed = false
	s.mu.Unlock()
	if fail {
		return fmt.Errorf("srcstest: open %s: %w", s.src.Name(), s.f.OpenErr)
	}
	return s.src.Open(ctx)
}

func (s *faulty) Read(p []byte) (int, error) {
	s.mu.Lock()
	if s.failed {
		s.mu.Unlock()
		return 0, s.f.ReadErr
	}
	if s.f.MaxRead > 0 && len(p) > s.f.MaxRead {
		p = p[:s.f.MaxRead]
	}
	armed := s.f.ReadErr != nil && !s.fired
	if armed {
		left := s.f.ErrAfter - s.read
		if left <= 0 {
			s.fired, s.failed = true, true
			s.mu.Unlock()
			return 0, s.f.ReadErr
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	s.mu.Unlock()

	n, err := s.src.Read(p)

	s.mu.Lock()
	s.read += int64(n)
	if armed && s.read >= s.f.ErrAfter {
		// The fault shows on the next Read, as a kernel returns the data
		// that arrived before a reset and reports the reset afterwards.
		s.fired, s.failed = true, true
	}
	s.mu.Unlock()
	return n, err
}

func (s *faulty) Close() error { return s.src.Close() }

// Reset closes c so that its peer sees a reset (RST) instead of an orderly
// end of stream: SO_LINGER with a zero timeout makes close(2) drop unsent
// data and abort the connection.
func Reset(c *net.TCPConn) error {
	if err := c.SetLinger(0); err != nil {
		c.Close()
		return fmt.Errorf("srcstest: reset: %w", err)
	}
	return c.Close()
}
