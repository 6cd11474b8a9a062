package driver

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sluice-io/sluice/srcs"
)

// AdmitDescriptor is CheckDescriptor for a runner that reads the
// descriptor itself, followed by the runner's own admission (admit: it is
// open and does not drive l already), asked before Desc, which may detach
// a connection from Go's netpoller for good. It returns the descriptor,
// checked: a valid number, framing its kind allows, a File's offset not
// negative, a Datagram descriptor a SOCK_DGRAM socket; and for a Stream,
// its file type (the S_IFMT bits of its mode), which tells a socket from
// a pipe, a regular file or a directory.
func AdmitDescriptor(runner string, l *srcs.Lane, admit func(*srcs.Lane) error) (d srcs.Desc, ftype uint32, err error) {
	fail := func(err error) (srcs.Desc, uint32, error) {
		return srcs.Desc{}, 0, fmt.Errorf("%s: add lane %d (%s): %w", runner, l.ID, l.Name(), err)
	}
	ds, err := CheckDescriptor(runner, l)
	if err != nil {
		return srcs.Desc{}, 0, err
	}
	if err := admit(l); err != nil {
		return srcs.Desc{}, 0, err
	}
	if d, err = ds.Desc(); err != nil {
		return fail(err)
	}
	if d.FD < 0 {
		return fail(fmt.Errorf("invalid descriptor %d", d.FD))
	}
	if err := srcs.CheckFraming(l, d.Kind); err != nil {
		return srcs.Desc{}, 0, fmt.Errorf("%s: add %w", runner, err)
	}
	switch d.Kind {
	case srcs.File:
		if d.Offset < 0 {
			return fail(fmt.Errorf("negative offset %d", d.Offset))
		}
	case srcs.Datagram:
		if err := CheckDatagramSocket(d.FD); err != nil {
			return fail(err)
		}
	case srcs.Stream:
		var st unix.Stat_t
		if err := unix.Fstat(d.FD, &st); err != nil {
			return fail(os.NewSyscallError("fstat", err))
		}
		ftype = uint32(st.Mode) & unix.S_IFMT
	default:
		return fail(fmt.Errorf("unknown descriptor kind %v", d.Kind))
	}
	return d, ftype, nil
}

// CheckDatagramSocket checks that a Datagram descriptor is a SOCK_DGRAM
// socket: MSG_TRUNC would discard a stream's data, and a seqpacket
// socket's end would read as an empty datagram.
func CheckDatagramSocket(fd int) error {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	switch {
	case err == unix.ENOTSOCK:
		return fmt.Errorf("datagram descriptor %d: %w", fd, unix.ENOTSOCK)
	case err != nil:
		return fmt.Errorf("datagram descriptor %d: %w", fd, os.NewSyscallError("getsockopt", err))
	case typ != unix.SOCK_DGRAM:
		return fmt.Errorf("datagram descriptor %d is a socket of type %d, not SOCK_DGRAM: %w", fd, typ, unix.EPROTOTYPE)
	}
	return nil
}
