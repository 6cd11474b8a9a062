package synthetic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// DefaultMaxWrite is Config.MaxWrite when zero.
const DefaultMaxWrite = 64 << 10

// PCG stream selectors: the bytes and the write sizes come from separate
// generators, so the bytes do not depend on MaxWrite and Digest needs only
// the seed and the total.
const (
	synthDataStream = 0x736c75696365_01
	synthSizeStream = 0x736c75696365_02
)

// Config configures New.
type Config struct {
	// Name is the source's name; empty means "synthetic://<seed>".
	Name string `yaml:"name"`
	// Total is the number of bytes to send before end of stream.
	Total int64 `yaml:"total"`
	// Seed selects the bytes and the write sizes.
	Seed uint64 `yaml:"seed"`
	// MaxWrite is the largest write; each write has a random size from 1
	// to MaxWrite. Zero means DefaultMaxWrite.
	MaxWrite int `yaml:"max_write"`
	// Rate paces the writer in bytes per second. Zero means unlimited.
	Rate int64 `yaml:"rate"`
}

// Source is a source for tests and benchmarks: a unix socket pair
// whose far end a goroutine feeds with Total deterministic pseudo-random
// bytes, then closes. Digest tells what a reader must receive.
//
// The near end behaves as a Conn: Read goes through the Go netpoller, and
// Desc detaches the socket (non-blocking, Kind Stream) for a runner, after
// which Read is unavailable for the session. Each Open starts a new
// session that sends the same bytes again.
//
// Source is not safe for concurrent use, except that Close and
// SetReadDeadline may be called while Read blocks, and Digest at any time.
type Source struct {
	cfg  Config
	name string

	digestOnce sync.Once
	digest     uint32

	mu   sync.Mutex
	sess *synthSession // nil between sessions
}

// synthSession is one Open: the reading Conn and the writer goroutine.
type synthSession struct {
	conn   *srcs.Conn
	w      *os.File // owned by the writer goroutine, which closes it
	stop   chan struct{}
	exited chan struct{}
}

// New checks cfg and returns a source that has not opened yet.
func New(cfg Config) (*Source, error) {
	switch {
	case cfg.Total < 0:
		return nil, fmt.Errorf("synthetic: Total: %d is negative", cfg.Total)
	case cfg.MaxWrite < 0:
		return nil, fmt.Errorf("synthetic: MaxWrite: %d is negative", cfg.MaxWrite)
	case cfg.Rate < 0:
		return nil, fmt.Errorf("synthetic: Rate: %d is negative", cfg.Rate)
	}
	if cfg.MaxWrite == 0 {
		cfg.MaxWrite = DefaultMaxWrite
	}
	name := cfg.Name
	if name == "" {
		name = fmt.Sprintf("synthetic://%d", cfg.Seed)
	}
	return &Source{cfg: cfg, name: name}, nil
}

// Name returns the configured name.
func (s *Source) Name() string { return s.name }

// Digest returns the number of bytes a session sends and their CRC-32C
// (Castagnoli). The first call generates the stream once, without I/O.
func (s *Source) Digest() (bytes int64, crc32c uint32) {
	s.digestOnce.Do(func() {
		g := newSynthBytes(s.cfg.Seed)
		tab := crc32.MakeTable(crc32.Castagnoli)
		buf := make([]byte, 64<<10)
		var crc uint32
		for left := s.cfg.Total; left > 0; {
			n := int(min(left, int64(len(buf))))
			g.fill(buf[:n])
			crc = crc32.Update(crc, tab, buf[:n])
			left -= int64(n)
		}
		s.digest = crc
	})
	return s.cfg.Total, s.digest
}

// Open creates the socket pair and starts the writer.
func (s *Source) Open(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		return fmt.Errorf("synthetic: open %s: already open", s.name)
	}
	fds, err := socketpair()
	if err != nil {
		return fmt.Errorf("synthetic: open %s: %w", s.name, err)
	}
	// net.FileConn duplicates the descriptor; the *os.File only carries it.
	rf := os.NewFile(uintptr(fds[0]), s.name)
	nc, err := net.FileConn(rf)
	rf.Close()
	if err != nil {
		unix.Close(fds[1])
		return fmt.Errorf("synthetic: open %s: %w", s.name, err)
	}
	// A non-blocking descriptor makes a pollable *os.File, so a write
	// deadline can stop the writer while it waits for the reader.
	w := os.NewFile(uintptr(fds[1]), s.name+" (writer)")
	sess := &synthSession{
		conn:   srcs.NewConn(nc),
		w:      w,
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go sess.write(s.cfg)
	s.sess = sess
	return nil
}

// write sends the stream, paced at cfg.Rate, then closes its end so the
// reader sees end of stream. It returns early when the session stops.
func (sess *synthSession) write(cfg Config) {
	defer close(sess.exited)
	defer sess.w.Close()

	data := newSynthBytes(cfg.Seed)
	sizes := rand.New(rand.NewPCG(cfg.Seed, synthSizeStream))
	buf := make([]byte, min(int64(cfg.MaxWrite), max(cfg.Total, 1)))
	var timer *time.Timer
	start := time.Now()
	for sent := int64(0); sent < cfg.Total; {
		n := int(min(int64(1+sizes.IntN(cfg.MaxWrite)), cfg.Total-sent))
		if cfg.Rate > 0 {
			due := start.Add(time.Duration(float64(sent) * float64(time.Second) / float64(cfg.Rate)))
			if d := time.Until(due); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
					defer timer.Stop()
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-sess.stop:
					return
				}
			}
		}
		data.fill(buf[:n])
		if _, err := sess.w.Write(buf[:n]); err != nil {
			return // stopped (deadline), or the reader closed its end
		}
		sent += int64(n)
	}
}

func (s *Source) session(op string) (*srcs.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return nil, fmt.Errorf("synthetic: %s %s: no session: %w", op, s.name, net.ErrClosed)
	}
	return s.sess.conn, nil
}

// Read reads the stream through the Go netpoller.
func (s *Source) Read(p []byte) (int, error) {
	c, err := s.session("read")
	if err != nil {
		return 0, err
	}
	return c.Read(p)
}

// SetReadDeadline sets the deadline of the session's reads.
func (s *Source) SetReadDeadline(t time.Time) error {
	c, err := s.session("set deadline")
	if err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

// SyscallConn gives the reading socket's raw connection, so that a runner
// can wait for readability before it takes a buffer (see
// srcs.Conn.SyscallConn).
func (s *Source) SyscallConn() (syscall.RawConn, error) {
	c, err := s.session("syscall conn")
	if err != nil {
		return nil, err
	}
	return c.SyscallConn()
}

// Desc detaches the reading socket for a runner (see srcs.Conn.Desc).
func (s *Source) Desc() (contract.Desc, error) {
	c, err := s.session("desc")
	if err != nil {
		return contract.Desc{}, err
	}
	return c.Desc()
}

// Close stops the writer, waits for it to exit, and closes the reading
// end. It is idempotent, and Open may follow.
func (s *Source) Close() error {
	s.mu.Lock()
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	// Close the reading end first: stopping the writer first would close
	// its end, and a blocked Read would take the cut stream for a
	// complete one (EOF) instead of failing with net.ErrClosed.
	err := sess.conn.Close()
	close(sess.stop)
	// A writer blocked on a full socket already fails (EPIPE) now that
	// the reading end is closed; the deadline makes sure of it. Once the
	// writer has exited and closed w, this fails harmlessly.
	sess.w.SetWriteDeadline(time.Unix(1, 0))
	<-sess.exited
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("synthetic: close %s: %w", s.name, err)
	}
	return nil
}

// synthBytes generates the byte stream: little-endian 64-bit PCG outputs,
// cut anywhere, so that the stream does not depend on how fill is called.
type synthBytes struct {
	src   *rand.PCG
	carry uint64 // unused bytes of the last output, low byte first
	left  int
}

func newSynthBytes(seed uint64) *synthBytes {
	return &synthBytes{src: rand.NewPCG(seed, synthDataStream)}
}

func (g *synthBytes) fill(p []byte) {
	i := 0
	for ; i < len(p) && g.left > 0; i++ {
		p[i] = byte(g.carry)
		g.carry >>= 8
		g.left--
	}
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], g.src.Uint64())
	}
	if i < len(p) {
		g.carry, g.left = g.src.Uint64(), 8
		for ; i < len(p); i++ {
			p[i] = byte(g.carry)
			g.carry >>= 8
			g.left--
		}
	}
}

var (
	_ srcs.Source         = (*Source)(nil)
	_ contract.Descriptor = (*Source)(nil)
	_ srcs.Deadliner      = (*Source)(nil)
	_ syscall.Conn        = (*Source)(nil)
)
