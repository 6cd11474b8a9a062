package srcs

import (
	"sync/atomic"
)

// Automatic receive buffers, for a TCP listener whose RecvBuffer is zero.
//
// A few connections are best left to the kernel's autotuning, which grows
// a busy connection's receive buffer to what its round trip needs. Many
// busy connections are not: hundreds of autotuned buffers together
// exhaust the kernel's TCP memory (net.ipv4.tcp_mem), and under that
// pressure it shrinks every window to a few segments and drops arriving
// packets, so the senders send smaller segments, fewer bytes get through
// per packet, and the receiving CPU spends more of itself on each byte,
// whichever way the bytes are read. So once a listener holds
// autoRecvAfter connections at once, it gives the connections it accepts
// from then on a receive buffer of autoRecvBuffer (the kernel doubles it
// for its bookkeeping), for the rest of its life: a socket option once
// set cannot be handed back to the autotuning.
// docs/decisions/0024-receive-buffers.md has the runs that chose both.
const (
	autoRecvBuffer = 256 << 10
	autoRecvAfter  = 16
)

// recvAuto is a listener's automatic receive buffer: the connections it
// holds, and whether it has set the buffer. Safe for concurrent use.
type recvAuto struct {
	on   bool // RecvBuffer was zero on a TCP listener
	live atomic.Int64
	set  atomic.Bool
}

// opened counts a connection the listener accepted, and sets the
// listener's receive buffer the first time it holds autoRecvAfter.
func (l *Listener) opened() {
	a := &l.recv
	if n := a.live.Add(1); a.on && n >= autoRecvAfter && a.set.CompareAndSwap(false, true) {
		if err := l.setRecvBuffer(autoRecvBuffer); err != nil {
			l.log.Warn("srcs: listener: setting the receive buffer of connections to come", "listener", l.name, "bytes", autoRecvBuffer, "err", err)
			return
		}
		l.log.Info("srcs: listener: connections accepted from now on get a fixed receive buffer (RecvBuffer -1 leaves them to the kernel's autotuning)",
			"listener", l.name, "connections", n, "bytes", autoRecvBuffer)
	}
}

// closedConn counts a connection of the listener's that closed.
func (l *Listener) closedConn() { l.recv.live.Add(-1) }
