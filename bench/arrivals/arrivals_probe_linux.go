package arrivals

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// readStamped reads c to its end, at most msgSize bytes a read, with
// SO_TIMESTAMPNS on: every read returns the kernel's receive stamp of the
// last segment it took bytes from. Reading a message at a time keeps a
// segment of one message to one read, so its stamp is its own.
func readStamped(c net.Conn, msgSize int) ([]arrival, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, errors.New("bench: arrivals: not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil, fmt.Errorf("bench: arrivals: SO_TIMESTAMPNS: %v", errors.Join(err, serr))
	}
	buf := make([]byte, msgSize)
	oob := make([]byte, unix.CmsgSpace(16))
	out := make([]arrival, 0, 1024)
	for {
		var n, oobn int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), buf, oob, 0)
			return rerr != unix.EAGAIN
		})
		now := time.Now().UnixNano()
		switch {
		case err != nil:
			return out, err
		case rerr == unix.EINTR:
			continue
		case rerr != nil:
			return out, rerr
		case n == 0:
			return out, nil
		}
		ts := stampOf(oob[:oobn])
		if ts == 0 {
			ts = now
		}
		out = append(out, arrival{ts: ts, read: now, n: int32(n)})
	}
}

// capture stamps every data segment sent to one TCP port on the loopback
// device, from an AF_PACKET socket (CAP_NET_RAW): the kernel stamps each
// segment as the loopback device queues it, in the sender's write, and
// queues a copy with its stamp for the capture, so the stamps do not
// depend on how soon anyone reads them. Not safe for concurrent use.
type capture struct {
	fd      int
	port    int
	stopped atomic.Bool
	done    chan struct{}
	segs    []segment
	err     error
}

// segment is one data segment: its source port (the connection), stamp
// and payload bytes.
type segment struct {
	sport uint16
	ts    int64
	n     int32
}

// captureSnap is how much of a packet the filter passes: the IP and TCP
// headers with options.
const captureSnap = 128

// startCapture opens the capture for segments to port on 127.0.0.1.
func startCapture(port int) (*capture, error) {
	// The protocol in network byte order, as AF_PACKET wants it.
	var be [2]byte
	binary.BigEndian.PutUint16(be[:], unix.ETH_P_IP)
	proto := int(binary.NativeEndian.Uint16(be[:]))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("bench: arrivals: packet socket: %w", err)
	}
	fail := func(what string, err error) (*capture, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("bench: arrivals: %s: %w", what, err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fail("loopback", err)
	}
	// IPv4, TCP, destination port: pass the headers, drop the rest.
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 9},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 4, K: unix.IPPROTO_TCP},
		{Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 0},
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 2},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(port)},
		{Code: unix.BPF_RET | unix.BPF_K, K: captureSnap},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return fail("filter", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: lo.Index}); err != nil {
		return fail("bind", err)
	}
	// Room for every stamp of a run the reader falls behind on; the
	// kernel counts what does not fit as drops.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 256<<20)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	// Packets that passed before the filter was attached are in the
	// queue already; the reader checks the port again.
	c := &capture{fd: fd, port: port, done: make(chan struct{})}
	go c.run()
	return c, nil
}

// run reads segments until stopped, on a thread of its own: the socket
// blocks, with a timeout, so that stop is noticed.
func (c *capture) run() {
	defer close(c.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, captureSnap)
	oob := make([]byte, unix.CmsgSpace(16))
	for {
		n, oobn, _, from, err := unix.Recvmsg(c.fd, buf, oob, 0)
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			if c.stopped.Load() {
				return
			}
			continue
		case err != nil:
			c.err = err
			return
		}
		// A socket bound to one protocol sees each loopback segment once,
		// as it reaches the receiving side of the device (outgoing copies
		// go to ETH_P_ALL taps only), stamped when the loopback device
		// queues it, in the sender's write.
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_HOST {
			continue
		}
		p := buf[:n]
		if len(p) < 20 || p[0]>>4 != 4 || p[9] != unix.IPPROTO_TCP {
			continue
		}
		ihl := int(p[0]&0xf) * 4
		total := int(binary.BigEndian.Uint16(p[2:4]))
		if len(p) < ihl+14 {
			continue
		}
		tcp := p[ihl:]
		if int(binary.BigEndian.Uint16(tcp[2:4])) != c.port {
			continue
		}
		payload := total - ihl - int(tcp[12]>>4)*4
		if payload <= 0 {
			continue // an ACK or a handshake
		}
		c.segs = append(c.segs, segment{sport: binary.BigEndian.Uint16(tcp[0:2]), ts: stampOf(oob[:oobn]), n: int32(payload)})
	}
}

// finish stops the capture and returns the segments, and how many
// packets the kernel dropped for want of room.
func (c *capture) finish() ([]segment, uint32, error) {
	// Let the last segments arrive and be read.
	time.Sleep(200 * time.Millisecond)
	c.stopped.Store(true)
	<-c.done
	var drops uint32
	if st, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		drops = st.Drops
	}
	unix.Close(c.fd)
	return c.segs, drops, c.err
}

// stampOf reads the SCM_TIMESTAMPNS stamp out of a control message, or 0.
func stampOf(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			return int64(binary.NativeEndian.Uint64(m.Data[0:8]))*1e9 + int64(binary.NativeEndian.Uint64(m.Data[8:16]))
		}
	}
	return 0
}

// captureAvailable says whether this process may open a packet socket.
func captureAvailable() bool {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
