package srcs

import (
	"errors"
	"fmt"
	"time"
)

// ParkMax bounds the part of a record an idle framed lane keeps outside the
// pool: a lane that has held only part of a record for a flush timeout
// gives its buffer back and keeps the part, up to ParkMax bytes, until its
// next buffer. A longer part keeps its buffer.
const ParkMax = 4 << 10

// BytesEmitter is the optional capability of an Emitter that can take
// bytes held outside the pool. A framed lane that ends while part of a
// record waits outside the pool (see ParkMax), and finds no buffer free,
// hands the part over this way rather than lose it. The emitter takes
// data; the runner does not touch it again.
type BytesEmitter interface {
	EmitBytes(l *Lane, data []byte, flags Flags, first time.Time)
}

// ErrFramedDatagrams refuses a framer on a datagram lane: datagrams keep
// their own boundaries (see ForEachDatagram).
var ErrFramedDatagrams = errors.New("srcs: framing applies to streams and files, not datagrams")

// CheckFraming returns an error when l has a framer its descriptor kind
// cannot take. Runners call it when they add a lane.
func CheckFraming(l *Lane, k Kind) error {
	if l.Framer != nil && k == Datagram {
		return fmt.Errorf("lane %d (%s): framing %s: %w", l.ID, l.Name(), l.Framer, ErrFramedDatagrams)
	}
	return nil
}
