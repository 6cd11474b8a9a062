package contract

import (
	"errors"
	"fmt"
)

// Kind says how a runner reads a descriptor.
type Kind uint8

const (
	// Stream is a connected byte stream: recv(2) or read(2) until 0 bytes.
	Stream Kind = iota
	// Datagram is a message socket: one recvmsg(2) per datagram, boundaries
	// preserved (see srcs.ForEachDatagram).
	Datagram
	// File is a regular file read positionally from Desc.Offset.
	File
)

func (k Kind) String() string {
	switch k {
	case Stream:
		return "stream"
	case Datagram:
		return "datagram"
	case File:
		return "file"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Desc describes a source's kernel descriptor to a runner.
type Desc struct {
	FD   int
	Kind Kind
	// Offset is where a File read starts.
	Offset int64
}

// Descriptor is the optional capability of sources backed by a kernel
// descriptor. Runners that drive descriptors directly (uring, epoll,
// thread) use it; the goroutine runner calls Read instead. The source keeps
// ownership of the descriptor: a runner never closes it, and stops using it
// before it calls Close. The descriptor may be in non-blocking mode.
type Descriptor interface {
	// Desc returns the descriptor of the current session, valid from a
	// successful Open until Close.
	Desc() (Desc, error)
}

// HandOff is the optional capability of a Descriptor source whose
// descriptor a runner may take for good. The uring runner takes an
// accepted connection's socket into its worker's registered file table
// (engine.Config.FileSlots), where it no longer counts against the
// process's RLIMIT_NOFILE.
type HandOff interface {
	// HandOff gives fd, which Desc returned, to the runner, and reports
	// whether the source still held it. From then on the runner owns
	// the descriptor: it closes it when the lane ends, and the source's
	// Close releases only what else the source holds. Desc, Read and
	// Open fail after it. Once Close has begun, HandOff reports false
	// and the source keeps the descriptor.
	HandOff(fd int) bool
}

// Encrypted is the optional capability of sources that are Descriptors by
// type but whose descriptor may carry ciphertext: a TLS session is
// decrypted by its source's Read, so no runner may read its socket raw.
// The engine hands a source whose Encrypted returns true to the goroutine
// runner; such a source's Desc fails with srcs.ErrNoDescriptor. The answer
// is fixed when the source is made (by its configuration) and must not
// change.
type Encrypted interface {
	Encrypted() bool
}

// DatagramSizer is the optional capability of datagram sources that know the
// largest datagram they expect. Runners reserve that much room (plus the
// header) for each receive, so a smaller limit packs more datagrams into a
// buffer. Datagrams above the limit are still delivered when they happen to
// fit the room their receive was given, and dropped otherwise: a receive of
// one datagram has the rest of the buffer, and a receive of several (the
// epoll runner's recvmmsg) the limit for each but the last, whose room
// runs to the end of the buffer.
type DatagramSizer interface {
	// MaxDatagram returns the limit in bytes, at least 1. It must not
	// change while a runner drives the source.
	MaxDatagram() int
}

// DatagramReader is the optional capability of datagram sources read
// through their Read method rather than a descriptor (the goroutine runner).
// A source of Kind Datagram must offer it to keep its datagram boundaries on
// that runner; without it the runner treats the source as a byte stream.
type DatagramReader interface {
	// ReadDatagram receives one datagram into p and returns the number of
	// bytes placed there. truncated reports that the datagram was longer
	// than p: its tail is lost, and the runner drops it. Like Read, it
	// honours the source's read deadline (os.ErrDeadlineExceeded).
	ReadDatagram(p []byte) (n int, truncated bool, err error)
}

// ErrNoDescriptor says a source has no kernel descriptor to give: a TLS
// session, whose socket carries ciphertext, or a connection whose socket
// a runner took. It is srcs.ErrNoDescriptor, defined here so that the
// TLS readers below srcs can return it too.
var ErrNoDescriptor = errors.New("srcs: source has no kernel descriptor")
