package idle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
	"golang.org/x/sys/unix"
)

// idleSupported says whether `idle` can run here: it needs Linux for
// all of 127.0.0.0/8 on loopback, IP_BIND_ADDRESS_NO_PORT and /proc.
func idleSupported() error { return nil }

// raiseNoFile raises RLIMIT_NOFILE to need if it is lower, and the hard
// limit with it when that is lower too, which takes CAP_SYS_RESOURCE
// (root). It fails beyond /proc/sys/fs/nr_open, or when the hard limit
// cannot be raised.
func raiseNoFile(need uint64) (NoFileLimit, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return NoFileLimit{Need: need}, fmt.Errorf("getrlimit: %w", err)
	}
	lim := NoFileLimit{Need: need, SoftBefore: rl.Cur, HardBefore: rl.Max, Soft: rl.Cur, Hard: rl.Max}
	if rl.Cur >= need {
		return lim, nil
	}
	if n, ok := nrOpen(); ok && need > n {
		return lim, fmt.Errorf("needs %d descriptors, above the kernel's nr_open (%d)", need, n)
	}
	rl.Cur = need
	rl.Max = max(rl.Max, need)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		if rl.Max > lim.HardBefore {
			return lim, fmt.Errorf("needs %d descriptors but the hard limit is %d, and raising it takes root (CAP_SYS_RESOURCE) or ulimit -Hn: %w",
				need, lim.HardBefore, err)
		}
		return lim, fmt.Errorf("setrlimit to %d descriptors: %w", need, err)
	}
	lim.Soft, lim.Hard = rl.Cur, rl.Max
	return lim, nil
}

// nrOpen is /proc/sys/fs/nr_open, the most descriptors the kernel lets a
// process have, and whether it could be read.
func nrOpen() (uint64, bool) {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// noFileHard is the most this process may raise its soft RLIMIT_NOFILE
// to: the hard limit, or nr_open when that is lower (an unlimited hard
// limit).
func noFileHard() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if n, ok := nrOpen(); ok {
		return min(rl.Max, n), nil
	}
	return rl.Max, nil
}

// countFDs counts this process's open descriptors, asking after each
// number below the soft RLIMIT_NOFILE (fcntl F_GETFD): that opens
// nothing, so it counts when no descriptor is left, and unlike listing
// /proc/self/fd it leaves the kernel no inode or dentry per descriptor,
// which the kernel's slab figures would count. -1 when it cannot tell.
func countFDs() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return -1
	}
	n := 0
	for fd := range min(rl.Cur, idleNoFileCap) {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			n++
		}
	}
	return n
}

// rssAnon is RssAnon of /proc/self/status: the resident set without the
// mapped files (the binary's text).
func rssAnon() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("RssAnon:")); ok {
			return harness.KBField(v)
		}
	}
	return 0
}

// readKernelMem reads the host's socket counts (/proc/net/sockstat), its
// slab total (/proc/meminfo) and, when readable (root), every slab cache
// (/proc/slabinfo).
func readKernelMem() (KernelMem, error) {
	var k KernelMem
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return k, fmt.Errorf("bench: %w", err)
	}
	parseSockstat(b, &k)
	k.TCPMemBytes = k.TCPMemPages * int64(os.Getpagesize())
	if b, err = os.ReadFile("/proc/meminfo"); err != nil {
		return k, fmt.Errorf("bench: %w", err)
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Slab:")); ok {
			k.Slab = harness.KBField(v)
		}
	}
	if b, err := os.ReadFile("/proc/slabinfo"); err == nil {
		k.Caches = parseSlabinfo(b)
	}
	return k, nil
}

// parseSockstat reads /proc/net/sockstat's "sockets: used N" and its TCP
// line into k.
func parseSockstat(b []byte, k *KernelMem) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		fields := map[string]int64{}
		for i := 1; i+1 < len(f); i += 2 {
			n, _ := strconv.ParseInt(f[i+1], 10, 64)
			fields[f[i]] = n
		}
		switch f[0] {
		case "sockets:":
			k.SocketsUsed = fields["used"]
		case "TCP:":
			k.TCPInuse, k.TCPOrphan, k.TCPTimeWait = fields["inuse"], fields["orphan"], fields["tw"]
			k.TCPAlloc, k.TCPMemPages = fields["alloc"], fields["mem"]
		}
	}
}

// parseSlabinfo reads /proc/slabinfo (version 2.1): each cache's active
// objects and object size.
func parseSlabinfo(b []byte) map[string]SlabCache {
	out := map[string]SlabCache{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || strings.HasPrefix(f[0], "#") || f[0] == "slabinfo" {
			continue
		}
		objs, err1 := strconv.ParseInt(f[1], 10, 64)
		size, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		c := out[f[0]] // a name may repeat (per-memcg caches): sum them
		c.Objects += objs
		c.ObjSize = size
		out[f[0]] = c
	}
	return out
}

// idleConns is an idle client: raw non-blocking sockets, each bound to
// a source address (IP_BIND_ADDRESS_NO_PORT, so that connect picks the
// port per destination) and connected to a listener. Client index of
// procs opens the plan's connections index, index+procs..., each on the
// (source, listener) pair idlePair gives it, so that the clients
// together spread their connections over the pairs round robin. The
// sockets are registered with nothing and never read: they cost the
// client a descriptor and the kernel a socket. Not safe for concurrent
// use.
type idleConns struct {
	dst   []unix.SockaddrInet4
	src   []unix.SockaddrInet4
	index int
	procs int
	fds   []int // established
	pend  []int // connecting
	pfds  []unix.PollFd
	next  int // connections begun
}

// idleInFlight bounds the client's connects in progress.
const idleInFlight = 1024

func newIdleConns(spec idleClientSpec) (*idleConns, idleReady, error) {
	var ready idleReady
	lim, err := raiseNoFile(spec.NoFile)
	ready.NoFile = lim
	if err != nil {
		return nil, ready, err
	}
	if len(spec.Dst) == 0 || len(spec.Src) == 0 {
		return nil, ready, errors.New("no destination or no source address")
	}
	c := &idleConns{index: spec.Index, procs: max(1, spec.Procs)}
	if c.index < 0 || c.index >= c.procs {
		return nil, ready, fmt.Errorf("client %d of %d", spec.Index, spec.Procs)
	}
	for _, a := range spec.Dst {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().Is4() {
			return nil, ready, fmt.Errorf("destination %q: not an IPv4 address and port", a)
		}
		c.dst = append(c.dst, unix.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())})
	}
	for _, a := range spec.Src {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() {
			return nil, ready, fmt.Errorf("source %q: not an IPv4 address", a)
		}
		c.src = append(c.src, unix.SockaddrInet4{Addr: ip.As4()})
	}
	return c, ready, nil
}

func (c *idleConns) handle(ctx context.Context, req idleReq) (*idleResp, error) {
	switch req.Op {
	case opOpen:
		o, err := c.open(ctx, int(req.Target))
		if err != nil {
			return nil, err
		}
		return &idleResp{Opened: o}, nil
	case opClose:
		c.close()
		return &idleResp{}, nil
	}
	return nil, fmt.Errorf("unknown request %q", req.Op)
}

// open connects until total connections are established.
func (c *idleConns) open(ctx context.Context, total int) (*idleOpened, error) {
	start := time.Now()
	deadline := start.Add(idleStepTimeout)
	for len(c.fds) < total {
		for len(c.pend) < idleInFlight && len(c.fds)+len(c.pend) < total {
			fd, busy, err := c.dial()
			switch {
			case err != nil:
				c.abandon()
				return nil, err
			case busy:
				c.pend = append(c.pend, fd)
			default:
				c.fds = append(c.fds, fd)
			}
		}
		if len(c.pend) == 0 {
			continue
		}
		c.pfds = c.pfds[:0]
		for _, fd := range c.pend {
			c.pfds = append(c.pfds, unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT})
		}
		if _, err := unix.Poll(c.pfds, 100); err != nil && err != unix.EINTR {
			c.abandon()
			return nil, fmt.Errorf("poll: %w", err)
		}
		c.pend = c.pend[:0]
		var failed error
		for _, pf := range c.pfds {
			fd := int(pf.Fd)
			if pf.Revents == 0 {
				c.pend = append(c.pend, fd)
				continue
			}
			soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
			if err == nil && soerr == 0 {
				c.fds = append(c.fds, fd)
				continue
			}
			unix.Close(fd)
			if err == nil {
				err = unix.Errno(soerr)
			}
			failed = fmt.Errorf("connect: %w", err)
		}
		if failed != nil {
			c.abandon()
			return nil, failed
		}
		if err := ctx.Err(); err != nil {
			c.abandon()
			return nil, err
		}
		if time.Now().After(deadline) {
			c.abandon()
			return nil, fmt.Errorf("%d of %d connections established after %v", len(c.fds), total, idleStepTimeout)
		}
	}
	return &idleOpened{Open: int64(len(c.fds)), StartNs: start.UnixNano(), EndNs: time.Now().UnixNano()}, nil
}

// dial begins the next connection; busy means it is in progress.
func (c *idleConns) dial() (fd int, busy bool, err error) {
	g := c.index + c.next*c.procs
	c.next++
	si, di := idlePair(g, len(c.src), len(c.dst))
	src, dst := &c.src[si], &c.dst[di]
	fd, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("socket: %w", err)
	}
	if err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err == nil {
		err = unix.Bind(fd, src)
	}
	if err != nil {
		unix.Close(fd)
		return -1, false, fmt.Errorf("bind %v: %w", netip.AddrFrom4(src.Addr), err)
	}
	switch err = unix.Connect(fd, dst); err {
	case nil:
		return fd, false, nil
	case unix.EINPROGRESS:
		return fd, true, nil
	}
	unix.Close(fd)
	return -1, false, fmt.Errorf("connect %v -> %v:%d: %w", netip.AddrFrom4(src.Addr), netip.AddrFrom4(dst.Addr), dst.Port, err)
}

// abandon closes the connects in progress.
func (c *idleConns) abandon() {
	for _, fd := range c.pend {
		unix.Close(fd)
	}
	c.pend = c.pend[:0]
}

// close resets every connection (SO_LINGER 0): no TIME_WAIT stays.
func (c *idleConns) close() {
	c.abandon()
	for _, fd := range c.fds {
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		unix.Close(fd)
	}
	c.fds = nil
}
