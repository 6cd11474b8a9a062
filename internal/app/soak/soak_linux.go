package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// soakSupported says whether the soak can run here: it needs Linux for
// abstract unix socket names, the whole 127.0.0.0/8 on loopback,
// SIOCOUTQ and /proc/self.
func soakSupported() error { return nil }

// raiseFDLimit raises the soft RLIMIT_NOFILE to need if it is lower (Go
// raises it to the hard limit at start-up already), and returns the soft
// limit. It fails when the hard limit is below need.
func raiseFDLimit(need uint64) (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if rl.Cur >= need {
		return rl.Cur, nil
	}
	if rl.Max < need {
		return 0, fmt.Errorf("needs about %d descriptors (two per connection and %d more), but the hard limit is %d (ulimit -Hn)",
			need, soakFDMargin, rl.Max)
	}
	rl.Cur = need
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("setrlimit to %d descriptors: %w", need, err)
	}
	return rl.Cur, nil
}

// openFDs counts this process's open descriptors (/proc/self/fd, less
// the one reading it).
func openFDs() (int, error) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return 0, err
	}
	return len(names) - 1, nil
}

// sendQueued returns the bytes in c's send queue that the peer has not
// acknowledged yet (SIOCOUTQ).
// noPortAtBind is a Dialer's Control: IP_BIND_ADDRESS_NO_PORT leaves the
// choice of the local port to connect, which may then reuse a port that
// other local addresses use. Binding a port at bind time instead takes
// it from the host's whole ephemeral range, which thousands of soak
// connections (and their TIME_WAITs) would drain for every other program
// on the host.
func noPortAtBind(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

func sendQueued(c net.Conn) (int, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("%T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var q int
	var qerr error
	if err := rc.Control(func(fd uintptr) { q, qerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		return 0, err
	}
	return q, qerr
}

// listenQueue returns, for the TCP listener on port, the connections in
// its accept queue and those still in their handshake (SYN_RECV), from
// /proc/net/tcp and tcp6: when both are 0 no connection made to it can
// still reach its owner.
func listenQueue(port int) (backlog, handshakes int, err error) {
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return 0, 0, err
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue ...
			f := bytes.Fields(sc.Bytes())
			if len(f) < 5 {
				continue
			}
			_, lport, ok := bytes.Cut(f[1], []byte(":"))
			if p, err := strconv.ParseUint(string(lport), 16, 16); !ok || err != nil || int(p) != port {
				continue
			}
			switch string(f[3]) {
			case "0A": // LISTEN: rx_queue is the accept queue's length
				_, rx, _ := bytes.Cut(f[4], []byte(":"))
				n, _ := strconv.ParseInt(string(rx), 16, 64)
				backlog += int(n)
			case "03": // SYN_RECV
				handshakes++
			}
		}
	}
	return backlog, handshakes, nil
}

// listenOverflows returns the system's TcpExt ListenOverflows and
// ListenDrops counters (/proc/net/netstat): connections a listener's
// full accept queue turned away, on every socket of the host.
func listenOverflows() (overflows, drops uint64) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return 0, 0
	}
	var names []string
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i := 1; i < len(f) && i < len(names); i++ {
			n, _ := strconv.ParseUint(f[i], 10, 64)
			switch names[i] {
			case "ListenOverflows":
				overflows = n
			case "ListenDrops":
				drops = n
			}
		}
	}
	return overflows, drops
}

// describeFDs counts this process's open descriptors by kind: a file's
// path, a TCP socket's state and service port (the lower of its two
// ports), or the kind of a unix, UDP or anonymous descriptor.
func describeFDs() map[string]int {
	out := map[string]int{}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	tcp := tcpSockets()
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		ino, ok := strings.CutPrefix(l, "socket:[")
		if !ok {
			out[l]++
			continue
		}
		if d, ok := tcp[strings.TrimSuffix(ino, "]")]; ok {
			out[d]++
		} else {
			out["socket (not TCP)"]++
		}
	}
	return out
}

// tcpStates names the states of /proc/net/tcp.
var tcpStates = map[string]string{"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
	"05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}

// tcpSockets describes every TCP socket by inode: "tcp STATE port N".
func tcpSockets() map[string]string {
	out := map[string]string{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Scan()
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 10 || f[9] == "0" {
				continue
			}
			port := func(a string) uint64 {
				_, p, _ := strings.Cut(a, ":")
				n, _ := strconv.ParseUint(p, 16, 16)
				return n
			}
			lp, rp := port(f[1]), port(f[2])
			svc := lp
			if rp != 0 && rp < lp {
				svc = rp
			}
			out[f[9]] = fmt.Sprintf("tcp %s port %d", tcpStates[f[3]], svc)
		}
	}
	return out
}
