//go:build !linux

package arrivals

import (
	"errors"
	"net"
)

// readStamped needs SO_TIMESTAMPNS, which is Linux's.
func readStamped(net.Conn, int) ([]arrival, error) {
	return nil, errors.New("bench: arrivals: receive stamps (SO_TIMESTAMPNS) need Linux")
}

// capture is Linux's.
type capture struct{}

type segment struct {
	sport uint16
	ts    int64
	n     int32
}

func startCapture(int) (*capture, error) {
	return nil, errors.New("bench: arrivals: packet capture needs Linux")
}

func (*capture) finish() ([]segment, uint32, error) { return nil, 0, nil }

func captureAvailable() bool { return false }
