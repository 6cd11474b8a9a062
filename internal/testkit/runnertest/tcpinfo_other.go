//go:build !linux

package runnertest

import (
	"errors"
	"net"
)

// unacked would return how many bytes c has sent that its peer has not
// acknowledged; only Linux says (TCP_INFO).
func unacked(*net.TCPConn) (uint32, error) {
	return 0, errors.ErrUnsupported
}
