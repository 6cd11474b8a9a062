//go:build !linux

package soak

import (
	"errors"
	"net"
	"syscall"
)

var errSoakLinux = errors.New("bench: soak: needs Linux (abstract unix socket names, all of 127.0.0.0/8 on loopback, SIOCOUTQ, /proc/self)")

// soakSupported says whether the soak can run here: not outside Linux.
func soakSupported() error { return errSoakLinux }

func raiseFDLimit(uint64) (uint64, error) { return 0, errSoakLinux }

func openFDs() (int, error) { return 0, errSoakLinux }

func sendQueued(net.Conn) (int, error) { return 0, errSoakLinux }

func noPortAtBind(string, string, syscall.RawConn) error { return errSoakLinux }

func listenQueue(int) (backlog, handshakes int, err error) { return 0, 0, errSoakLinux }

func listenOverflows() (overflows, drops uint64) { return 0, 0 }

func describeFDs() map[string]int { return nil }
