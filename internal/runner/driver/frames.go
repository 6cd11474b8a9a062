package driver

import (
	"errors"
	"time"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// frames is the framing state of a Lane: how much of the buffer being
// filled holds whole records, how far the framer has looked past them,
// what is being skipped, and the part of a record parked outside the pool.
// The Lane follows these steps:
//
//   - after a read, Scan the buffer; it finds the records the read
//     completed, drops bytes of a record being skipped, and returns an
//     error that ends the lane;
//   - emit buf[:Done()] with the Records flag (when the buffer is full, on
//     a flush, or after every read when the lane holds no partial data),
//     after moving the tail buf[Done():n] into the lane's next buffer
//     with Carry;
//   - when the lane ends, emit all it holds, Truncated when a tail is left.
//
// Its zero value frames nothing (raw bytes).
type frames struct {
	f   srcs.Framer
	rs  contract.Resyncer    // f's, if it has one
	wf  contract.WholeFramer // f's, if it has one
	l   *contract.Lane
	rep contract.RecordReporter // l.Out's, if it has one
	sk  contract.SkipCounter    // l.Out's, if it has one

	done int   // bytes of the buffer holding whole records
	seen int   // bytes past done the framer scanned without finding an end
	skip int64 // bytes still to drop, or SkipToBoundary; 0 when not skipping

	park []byte // part of a record kept while the lane holds no buffer

	// cut says the Lane's buffer is emitted up to Done() as soon as the
	// lane holds its next buffer, into which the incomplete tail moves;
	// cutFlags are the flags it goes out with. The Lane keeps them.
	cut      bool
	cutFlags srcs.Flags
}

// Reset binds the state to l and its srcs.Framer, holding nothing.
func (s *frames) Reset(l *contract.Lane) {
	*s = frames{l: l}
	if l == nil || l.Framer == nil {
		return
	}
	s.f = l.Framer
	s.rs, _ = l.Framer.(contract.Resyncer)
	s.wf, _ = l.Framer.(contract.WholeFramer)
	s.rep, _ = l.Out.(contract.RecordReporter)
	s.sk, _ = l.Out.(contract.SkipCounter)
}

// On reports whether the lane is framed.
func (s *frames) On() bool { return s.f != nil }

// Done returns how many bytes at the start of the buffer are whole records.
func (s *frames) Done() int { return s.done }

// Scan frames the bytes of buf[:n] that follow the whole records found
// before, and returns n less the bytes it dropped while skipping a record
// that is too long (later bytes move down over them). An error ends the
// lane: the bytes from Done() to n belong to the bad record, and the
// caller drops them.
func (s *frames) Scan(buf []byte, n int) (int, error) {
	for s.done < n {
		if s.skip != 0 {
			p := buf[s.done:n]
			k, ok := len(p), false
			if s.skip > 0 {
				if int64(k) >= s.skip {
					k, ok = int(s.skip), true
				}
				s.skip -= int64(k)
			} else {
				k, ok = s.rs.Resync(p)
			}
			n = s.done + copy(buf[s.done:], buf[s.done+k:n])
			if s.sk != nil && k > 0 {
				s.sk.BytesSkipped(s.l, k)
			}
			if !ok {
				return n, nil
			}
			s.skip, s.seen = 0, 0
			continue
		}
		var k int
		var err error
		if s.wf != nil {
			k, err = s.wf.Whole(buf[s.done:n], s.seen, len(buf))
		} else {
			k, err = s.f.Next(buf[s.done:n], s.seen, len(buf))
		}
		if err != nil {
			var re *srcs.RecordError
			if errors.As(err, &re) && (re.Skip > 0 || re.Skip == srcs.SkipToBoundary && s.rs != nil) {
				s.skip, s.seen = re.Skip, 0
				if s.rep != nil {
					s.rep.RecordSkipped(s.l, re)
				}
				continue
			}
			return n, err
		}
		if k == 0 {
			s.seen = n - s.done
			if s.done == 0 && n == len(buf) {
				// The framer should have said so: a full buffer without
				// a record's end can never be emitted.
				return n, &srcs.RecordError{Framer: s.f.String(), Size: int64(n), Max: len(buf)}
			}
			return n, nil
		}
		s.done += k
		s.seen = 0
	}
	return n, nil
}

// Carry copies the tail of buf[:n], the bytes after its whole records, to
// the start of dst, which becomes the buffer the state describes, and
// returns the tail's length. The caller emits buf[:Done()] before or after,
// as it likes, but with Done() read before Carry.
func (s *frames) Carry(dst, buf []byte, n int) int {
	t := copy(dst, buf[s.done:n])
	s.done = 0
	return t
}

// Park copies buf[:n], which holds part of a record and no whole one, out
// of the pool, so that a lane that has waited a flush timeout for the rest
// gives its buffer back: a slow sender must not pin pool buffers. It
// reports false, and copies nothing, when whole records are held or the
// part is longer than contract.ParkMax. The lane's next buffer takes the part back
// with Unpark.
func (s *frames) Park(buf []byte, n int) bool {
	if s.f == nil || s.done != 0 || n == 0 || n > contract.ParkMax || len(s.park) > 0 {
		return false
	}
	s.park = append([]byte(nil), buf[:n]...)
	return true
}

// Flushable reports whether a flush of a buffer holding n bytes has work
// to do: whole records to emit, or a part of a record that Park would
// take. When it is false the buffer holds only part of a record too long
// to park, which no deadline can move: the lane has no flush deadline
// until a read completes the record, and must go on reading meanwhile.
func (s *frames) Flushable(n int) bool {
	return s.done > 0 || n > 0 && n <= contract.ParkMax && len(s.park) == 0
}

// Unpark copies the parked part to the start of dst, the lane's next
// buffer, and returns its length (0 when nothing is parked).
func (s *frames) Unpark(dst []byte) int {
	if len(s.park) == 0 {
		return 0
	}
	n := copy(dst, s.park)
	s.park = nil
	return n
}

// EmitParked hands the parked part downstream, flagged srcs.Truncated, when the
// lane ends while it waits outside the pool: into a buffer if the
// account has one free, else as bytes, if l.Out is a BytesEmitter. It
// reports false when it could do neither (the part is lost; an Emitter
// that frames should be a contract.BytesEmitter).
func (s *frames) EmitParked() bool {
	if len(s.park) == 0 {
		return true
	}
	l, p := s.l, s.park
	s.park = nil
	if b, ok := l.Account.TryAcquire(); ok {
		n := copy(b.Bytes(), p)
		l.Out.Emit(l, b, n, srcs.Partial|srcs.Records|srcs.Truncated, time.Time{})
		return true
	}
	if be, ok := l.Out.(contract.BytesEmitter); ok {
		be.EmitBytes(l, p, srcs.Partial|srcs.Records|srcs.Truncated, time.Time{})
		return true
	}
	return false
}

// Clear forgets the buffer: it went out whole, or was dropped.
func (s *frames) Clear() {
	s.done, s.seen = 0, 0
}

// recordFlags returns the flags of a chunk of n bytes that a framed lane
// emits while it holds done bytes of whole records: srcs.Records, and srcs.Truncated
// when bytes of an incomplete record follow them.
func recordFlags(done, n int) srcs.Flags {
	if n > done {
		return srcs.Records | srcs.Truncated
	}
	return srcs.Records
}
