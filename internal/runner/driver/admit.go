package driver

import (
	"fmt"
	"io"
	"os"

	"github.com/sluice-io/sluice/internal/contract"
	"golang.org/x/sys/unix"
)

// How says how a runner reads a descriptor it admitted.
type How uint8

const (
	// ReadSocket: a stream socket. Poll, then receive; a short receive
	// proves it drained (every arrival raises a new edge).
	ReadSocket How = iota + 1
	// ReadStream: a pipe, a tty or another stream that may not be ready.
	// Poll, then read.
	ReadStream
	// ReadFile: a regular file or a block device (a File, or a Stream
	// behind which one stands), which is never "not ready": read at
	// advancing offsets from Offset, without polling.
	ReadFile
	// ReadDatagrams: a SOCK_DGRAM socket. Poll, then receive datagrams.
	ReadDatagrams
)

// Admitted is a descriptor a runner admitted, and how to read it.
type Admitted struct {
	contract.Desc
	How How
}

// AdmitDescriptor is CheckDescriptor for a runner that reads the
// descriptor itself, followed by the runner's own admission (admit: it is
// open and does not drive l already), asked before Desc, which may detach
// a connection from Go's netpoller for good. It returns the descriptor,
// checked (a valid number, framing its kind allows, a File's offset not
// negative, a Datagram descriptor a SOCK_DGRAM socket, a Stream no
// directory), and how every runner reads it: the decision is made here
// once, so that a descriptor reads the same whichever runner has it.
func AdmitDescriptor(runner string, l *contract.Lane, admit func(*contract.Lane) error) (Admitted, error) {
	fail := func(err error) (Admitted, error) {
		return Admitted{}, fmt.Errorf("%s: add lane %d (%s): %w", runner, l.ID, l.Name(), err)
	}
	ds, err := CheckDescriptor(runner, l)
	if err != nil {
		return Admitted{}, err
	}
	if err := admit(l); err != nil {
		return Admitted{}, err
	}
	d, err := ds.Desc()
	if err != nil {
		return fail(err)
	}
	if d.FD < 0 {
		return fail(fmt.Errorf("invalid descriptor %d", d.FD))
	}
	if err := contract.CheckFraming(l, d.Kind); err != nil {
		return Admitted{}, fmt.Errorf("%s: add %w", runner, err)
	}
	a := Admitted{Desc: d}
	switch d.Kind {
	case contract.File:
		if d.Offset < 0 {
			return fail(fmt.Errorf("negative offset %d", d.Offset))
		}
		a.How = ReadFile
	case contract.Datagram:
		if err := CheckDatagramSocket(d.FD); err != nil {
			return fail(err)
		}
		a.How = ReadDatagrams
	case contract.Stream:
		var st unix.Stat_t
		if err := unix.Fstat(d.FD, &st); err != nil {
			return fail(os.NewSyscallError("fstat", err))
		}
		switch uint32(st.Mode) & unix.S_IFMT {
		case unix.S_IFSOCK:
			a.How = ReadSocket
		case unix.S_IFREG, unix.S_IFBLK:
			// Never "not ready", so a poll would only spin: read it like
			// a File from where its position stands.
			pos, err := unix.Seek(d.FD, 0, io.SeekCurrent)
			if err != nil {
				return fail(os.NewSyscallError("lseek", err))
			}
			a.How, a.Offset = ReadFile, pos
		case unix.S_IFDIR:
			return fail(unix.EISDIR)
		default:
			a.How = ReadStream
		}
	default:
		return fail(fmt.Errorf("unknown descriptor kind %v", d.Kind))
	}
	return a, nil
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
