package uring

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func writeAll(t *testing.T, fd int, p []byte) {
	t.Helper()
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		p = p[n:]
	}
}

func tempFile(t *testing.T, content []byte) int {
	t.Helper()
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func ms(d int64) Timespec { return Timespec{Nsec: d * int64(time.Millisecond)} }

func TestRead(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 1<<16)
		r := newRing(t, Config{Entries: 8})
		content := bytes.Repeat([]byte("sluice!"), 1000)
		fd := tempFile(t, content)
		buf := allocBytes(t, a, 100)
		s := sqe(t, r)
		s.PrepRead(fd, buf, 70)
		s.UserData = 1
		c := reap(t, r, 1)[0]
		wantRes(t, "read", c, 100)
		if !bytes.Equal(buf, content[70:170]) {
			t.Errorf("read %q, want %q", buf, content[70:170])
		}
	})
}

// TestReadFixed reads a file and a socket into registered buffers carved out
// of one mapping, the way the pool's slab is registered.
func TestReadFixed(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4*4096)
		r := newRing(t, Config{Entries: 8})
		slab := allocBytes(t, a, 2*4096)
		iovs := make([]unix.Iovec, 2)
		for i := range iovs {
			iovs[i].Base = &slab[i*4096]
			iovs[i].SetLen(4096)
		}
		if err := r.RegisterBuffers(iovs); err != nil {
			t.Fatalf("RegisterBuffers: %v", err)
		}
		content := bytes.Repeat([]byte{1, 2, 3, 4, 5}, 2000)
		file := tempFile(t, content)
		sock, peer := socketpair(t, unix.SOCK_STREAM)
		writeAll(t, peer, []byte("fixed over a socket"))

		s := sqe(t, r)
		s.PrepReadFixed(file, slab[:4096], 0, 0)
		s.UserData = 1
		s = sqe(t, r)
		s.PrepReadFixed(sock, slab[4096+10:4096+10+64], 0, 1) // inside buffer 1
		s.UserData = 2
		m := byUserData(t, reap(t, r, 2))
		wantRes(t, "file", m[1], 4096)
		wantRes(t, "socket", m[2], int32(len("fixed over a socket")))
		if !bytes.Equal(slab[:4096], content[:4096]) {
			t.Error("file data differs")
		}
		if got := string(slab[4096+10 : 4096+10+m[2].Res]); got != "fixed over a socket" {
			t.Errorf("socket data %q", got)
		}
		// Outside every registered buffer: the kernel refuses.
		s = sqe(t, r)
		s.PrepReadFixed(file, allocBytes(t, a, 16), 0, 0)
		s.UserData = 3
		wantRes(t, "unregistered memory", reap(t, r, 1)[0], -int32(unix.EFAULT))
		if err := r.UnregisterBuffers(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRegisterFiles(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		fd := tempFile(t, []byte("by index"))
		if err := r.RegisterFiles([]int32{-1, int32(fd)}); err != nil {
			t.Fatal(err)
		}
		buf := allocBytes(t, a, 8)
		s := sqe(t, r)
		s.PrepRead(1, buf, 0) // fixed-file index 1
		s.Flags |= SQEFixedFile
		wantRes(t, "read fixed file", reap(t, r, 1)[0], 8)
		if string(buf) != "by index" {
			t.Errorf("read %q", buf)
		}
		if err := r.UnregisterFiles(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRecv(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		sock, peer := socketpair(t, unix.SOCK_STREAM)
		buf := allocBytes(t, a, 64)
		for _, rf := range []RecvFlags{0, RecvPollFirst} {
			s := sqe(t, r)
			s.PrepRecv(sock, buf, 0, rf)
			s.UserData = uint64(rf) + 1
			if _, err := r.Submit(); err != nil {
				t.Fatal(err)
			}
			if r.CQReady() != 0 {
				t.Fatal("recv completed before any data was sent")
			}
			writeAll(t, peer, []byte("hello"))
			c := reap(t, r, 1)[0]
			wantRes(t, "recv", c, 5)
			if string(buf[:5]) != "hello" || c.UserData != uint64(rf)+1 {
				t.Errorf("recv %q, user_data %d", buf[:5], c.UserData)
			}
		}
	})
}

func TestRecvmsg(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		sock, peer := socketpair(t, unix.SOCK_DGRAM)
		buf := allocBytes(t, a, 8) // shorter than the datagram
		iov := alloc[unix.Iovec](t, a)
		iov.Base = &buf[0]
		iov.SetLen(len(buf))
		msg := alloc[unix.Msghdr](t, a)
		msg.Iov = iov
		msg.SetIovlen(1)
		s := sqe(t, r)
		s.PrepRecvmsg(sock, msg, 0)
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		writeAll(t, peer, []byte("datagram boundary"))
		c := reap(t, r, 1)[0]
		wantRes(t, "recvmsg", c, 8)
		if string(buf) != "datagram" || msg.Flags&unix.MSG_TRUNC == 0 {
			t.Errorf("recvmsg %q, flags %#x; want truncation", buf, msg.Flags)
		}
	})
}

// listenerFd returns the descriptor behind a net.Listener; it stays valid
// while the listener is open.
func listenerFd(t *testing.T, ln net.Listener) int {
	t.Helper()
	rc, err := ln.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fd := -1
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// TestAcceptRecvTCP accepts a loopback TCP connection into an off-heap
// address and receives from it.
func TestAcceptRecvTCP(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		addr := alloc[unix.RawSockaddrAny](t, a)
		addrLen := alloc[uint32](t, a)
		*addrLen = uint32(unsafe.Sizeof(*addr))
		s := sqe(t, r)
		s.PrepAccept(listenerFd(t, ln), addr, addrLen, unix.SOCK_CLOEXEC)
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c := reap(t, r, 1)[0]
		if c.Res < 0 {
			t.Fatalf("accept: %v", c.Err())
		}
		fd := int(c.Res)
		defer unix.Close(fd)
		in4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(addr))
		local := conn.LocalAddr().(*net.TCPAddr)
		if port := int(in4.Port>>8 | in4.Port<<8); in4.Family != unix.AF_INET || port != local.Port {
			t.Errorf("peer address family %d port %d, want %d", in4.Family, port, local.Port)
		}
		if _, err := conn.Write([]byte("over tcp")); err != nil {
			t.Fatal(err)
		}
		buf := allocBytes(t, a, 8)
		s = sqe(t, r)
		s.PrepRecv(fd, buf, unix.MSG_WAITALL, 0)
		wantRes(t, "recv", reap(t, r, 1)[0], 8)
		if string(buf) != "over tcp" {
			t.Errorf("recv %q", buf)
		}
	})
}

func TestMultishotAccept1000(t *testing.T) {
	const conns = 1000
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur < 2*conns+100 {
		t.Skipf("RLIMIT_NOFILE %d is too low for %d connections", lim.Cur, conns)
	}
	runLocked(t, func(t *testing.T) {
		requireFeature(t, "multishot accept (found through IORING_OP_SOCKET)", func(k kernel) bool { return k.ops.Has(OpSocket) }, 5, 19)
		r := newRing(t, Config{Entries: 64, CQEntries: 1024})
		lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(lfd)
		if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			t.Fatal(err)
		}
		if err := unix.Listen(lfd, 4096); err != nil {
			t.Fatal(err)
		}
		sa, err := unix.Getsockname(lfd)
		if err != nil {
			t.Fatal(err)
		}
		target := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*unix.SockaddrInet4).Port}

		const acceptUD = 1
		arm := func() {
			s := sqe(t, r)
			s.PrepAcceptMultishot(lfd, unix.SOCK_CLOEXEC)
			s.UserData = acceptUD
		}
		arm()
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}

		clients := make(chan []net.Conn, 1)
		dialErr := make(chan error, 1)
		go func() {
			var cs []net.Conn
			defer func() { clients <- cs }()
			for range conns {
				c, err := net.DialTCP("tcp", nil, target)
				if err != nil {
					dialErr <- err
					return
				}
				cs = append(cs, c)
			}
			dialErr <- nil
		}()

		accepted := make([]int, 0, conns)
		for len(accepted) < conns {
			if _, err := r.SubmitAndWaitTimeout(1, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			n := r.ForEachCQE(func(c *CQE) {
				if c.Res < 0 {
					t.Errorf("accept: %v", c.Err())
				} else {
					accepted = append(accepted, int(c.Res))
				}
				if !c.More() {
					arm() // the kernel ended the multishot; start another
				}
			})
			if n == 0 {
				t.Fatalf("no accept completion within 10s; have %d", len(accepted))
			}
		}
		if err := <-dialErr; err != nil {
			t.Fatal(err)
		}
		cs := <-clients
		if len(cs) != conns {
			t.Errorf("dialed %d", len(cs))
		}

		// Cancel the accept, close every accepted descriptor through the
		// ring, and count all the completions back.
		s := sqe(t, r)
		s.PrepCancel(acceptUD, 0)
		s.UserData = 2
		for i, fd := range accepted {
			s := sqe(t, r)
			s.PrepClose(fd)
			s.UserData = uint64(100 + i)
		}
		var canceled, closed int
		for _, c := range reap(t, r, conns+2) {
			switch {
			case c.UserData == acceptUD:
				wantRes(t, "cancelled accept", c, -int32(unix.ECANCELED))
				canceled++
			case c.UserData == 2:
				wantRes(t, "cancel", c, 0)
			default:
				wantRes(t, "close", c, 0)
				closed++
			}
		}
		if canceled != 1 || closed != conns {
			t.Errorf("cancelled %d accepts, closed %d of %d", canceled, closed, conns)
		}
		for _, c := range cs {
			c.Close()
		}
	})
}

// TestBufRingDryAndRefill runs a multishot recv until its provided buffers
// run out (ENOBUFS ends it), then refills the ring and arms it again.
func TestBufRingDryAndRefill(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		k := requireURing(t)
		if !k.ops.Has(OpSocket) || !k.ops.Has(OpSendZC) { // 5.19 and 6.0, where the kernel offers no direct probe
			t.Skip("needs provided buffer rings (5.19) and multishot recv (6.0)")
		}
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		const (
			group = 7
			nbuf  = 4
			size  = 16
		)
		br, err := r.RegisterBufRing(nbuf, group)
		if err != nil {
			t.Fatal(err)
		}
		bufs := make([][]byte, nbuf)
		for i := range bufs {
			bufs[i] = allocBytes(t, a, size)
			br.Add(bufs[i], uint16(i))
		}
		br.Commit()

		sock, peer := socketpair(t, unix.SOCK_STREAM)
		want := make([]byte, (nbuf+1)*size)
		for i := range want {
			want[i] = byte('a' + i%26)
		}
		writeAll(t, peer, want)

		var got []byte
		arm := func(ud uint64) {
			s := sqe(t, r)
			s.PrepRecvMultishot(sock, br.Group(), 0)
			s.UserData = ud
		}
		// collect reaps until the multishot ends and returns its last CQE.
		collect := func(stopAfter int) (last CQE) {
			for {
				for _, c := range reap(t, r, 1) {
					if c.Res > 0 {
						bid, ok := c.BufferID()
						if !ok || int(bid) >= nbuf {
							t.Fatalf("CQE without a valid buffer: %+v", c)
						}
						got = append(got, bufs[bid][:c.Res]...)
					}
					if !c.More() {
						return c
					}
					if stopAfter > 0 && len(got) >= stopAfter {
						return c
					}
				}
			}
		}

		arm(1)
		last := collect(0)
		wantRes(t, "recv on an empty buffer ring", last, -int32(unix.ENOBUFS))
		if len(got) != nbuf*size {
			t.Fatalf("received %d bytes before running dry, want %d", len(got), nbuf*size)
		}

		// Hand every buffer back and re-arm: the rest arrives.
		for i := range bufs {
			br.Add(bufs[i], uint16(i))
		}
		br.Commit()
		arm(2)
		if c := collect(len(want)); !c.More() {
			t.Fatalf("re-armed recv ended early: %+v", c)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("received %q, want %q", got, want)
		}
		// EOF ends the multishot.
		unix.Shutdown(peer, unix.SHUT_WR)
		wantRes(t, "recv at EOF", collect(0), 0)
		if err := r.UnregisterBufRing(br); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPollMultishotAndCancelFd(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		sock, peer := socketpair(t, unix.SOCK_STREAM)
		s := sqe(t, r)
		s.PrepPollMultishot(sock, unix.POLLIN)
		s.UserData = 1
		var scratch [8]byte
		for i := range 3 {
			writeAll(t, peer, []byte{byte(i)})
			c := reap(t, r, 1)[0]
			if c.UserData != 1 || c.Res&unix.POLLIN == 0 || !c.More() {
				t.Fatalf("poll %d: %+v", i, c)
			}
			if _, err := unix.Read(sock, scratch[:]); err != nil {
				t.Fatal(err)
			}
		}
		// Two recvs wait on the same socket; cancel everything on it by fd.
		buf := allocBytes(t, a, 16)
		for ud := uint64(2); ud <= 3; ud++ {
			s := sqe(t, r)
			s.PrepRecv(sock, buf, 0, 0)
			s.UserData = ud
		}
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		s = sqe(t, r)
		s.PrepCancelFd(sock, CancelAll)
		s.UserData = 4
		m := byUserData(t, reap(t, r, 4))
		wantRes(t, "cancel by fd", m[4], 3)
		for ud := uint64(1); ud <= 3; ud++ {
			wantRes(t, "cancelled op", m[ud], -int32(unix.ECANCELED))
			if m[ud].More() {
				t.Errorf("cancelled op %d still has CQEFMore", ud)
			}
		}
		if r.InFlight() != 0 {
			t.Errorf("InFlight = %d", r.InFlight())
		}
	})
}

func TestCancelByUserData(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		sock, _ := socketpair(t, unix.SOCK_STREAM)
		buf := allocBytes(t, a, 16)
		s := sqe(t, r)
		s.PrepRecv(sock, buf, 0, RecvPollFirst)
		s.UserData = 10
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		s = sqe(t, r)
		s.PrepCancel(10, 0)
		s.UserData = 11
		s = sqe(t, r)
		s.PrepCancel(12345, 0) // nothing has that user_data
		s.UserData = 12
		m := byUserData(t, reap(t, r, 3))
		wantRes(t, "recv", m[10], -int32(unix.ECANCELED))
		wantRes(t, "cancel", m[11], 0)
		wantRes(t, "cancel of nothing", m[12], -int32(unix.ENOENT))
	})
}

func TestTimeout(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		short := alloc[Timespec](t, a)
		*short = ms(5)
		long := alloc[Timespec](t, a)
		*long = Timespec{Sec: 3600}

		start := time.Now()
		s := sqe(t, r)
		s.PrepTimeout(short, 0, 0)
		s.UserData = 1
		wantRes(t, "timeout", reap(t, r, 1)[0], -int32(unix.ETIME))
		if d := time.Since(start); d < 5*time.Millisecond {
			t.Errorf("timeout fired after %v", d)
		}

		// A count-based timeout completes with 0 once one other CQE posts.
		s = sqe(t, r)
		s.PrepTimeout(long, 1, 0)
		s.UserData = 2
		s = sqe(t, r)
		s.PrepNop()
		s.UserData = 3
		m := byUserData(t, reap(t, r, 2))
		wantRes(t, "count timeout", m[2], 0)
		wantRes(t, "nop", m[3], 0)
	})
}

func TestLinkTimeout(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		a := newArena(t, 4096)
		r := newRing(t, Config{Entries: 8})
		sock, peer := socketpair(t, unix.SOCK_STREAM)
		buf := allocBytes(t, a, 16)
		ts := alloc[Timespec](t, a)
		*ts = ms(10)

		link := func(recvUD uint64) {
			s := sqe(t, r)
			s.PrepRecv(sock, buf, 0, 0)
			s.Flags |= SQEIOLink
			s.UserData = recvUD
			s = sqe(t, r)
			s.PrepLinkTimeout(ts, 0)
			s.UserData = recvUD + 1
		}
		// Nothing to read: the timeout fires and cancels the recv.
		link(1)
		m := byUserData(t, reap(t, r, 2))
		wantRes(t, "recv", m[1], -int32(unix.ECANCELED))
		wantRes(t, "link timeout", m[2], -int32(unix.ETIME))

		// Data waiting: the recv wins and the timeout is cancelled.
		writeAll(t, peer, []byte("quick"))
		link(3)
		m = byUserData(t, reap(t, r, 2))
		wantRes(t, "recv", m[3], 5)
		wantRes(t, "link timeout", m[4], -int32(unix.ECANCELED))
	})
}

func TestWaker(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		w, err := NewWaker()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		// Cleanups run last in, first out: the ring, made second, closes
		// before the waker its read is armed on.
		r := newRing(t, Config{Entries: 8})

		var (
			mu    sync.Mutex
			queue []int
		)
		armed := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for round := range 3 {
				<-armed
				var wg sync.WaitGroup
				for g := range 4 { // concurrent wakes coalesce into one write
					wg.Add(1)
					go func() {
						defer wg.Done()
						mu.Lock()
						queue = append(queue, round*10+g)
						mu.Unlock()
						if err := w.Wake(); err != nil {
							t.Error(err)
						}
					}()
				}
				wg.Wait()
			}
		}()

		w.Arm(sqe(t, r))
		var got []int
		for round := range 3 {
			if _, err := r.Submit(); err != nil {
				t.Fatal(err)
			}
			armed <- struct{}{}
			for len(got) < 4*(round+1) {
				c := reap(t, r, 1)[0]
				wantRes(t, "eventfd read", c, 8)
				if w.Count() == 0 || w.Count() > 4 {
					t.Errorf("eventfd count %d", w.Count())
				}
				// The loop's order: re-arm first, then drain the queue.
				w.Arm(sqe(t, r))
				if _, err := r.Submit(); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				got = append(got, queue...)
				queue = queue[:0]
				mu.Unlock()
			}
		}
		<-done
		if len(got) != 12 {
			t.Errorf("drained %d commands, want 12", len(got))
		}
		if r.InFlight() != 1 {
			t.Errorf("InFlight = %d, want the armed read", r.InFlight())
		}
	})
}

// TestCloseInFlight closes a ring with every kind of operation still armed.
func TestCloseInFlight(t *testing.T) {
	runLocked(t, func(t *testing.T) {
		requireURing(t)
		a := newArena(t, 4096)
		w, err := NewWaker()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r, err := New(Config{Entries: 16})
		if err != nil {
			t.Fatal(err)
		}
		sock, _ := socketpair(t, unix.SOCK_STREAM)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ts := alloc[Timespec](t, a)
		*ts = Timespec{Sec: 3600}
		br, err := r.RegisterBufRing(4, 1)
		if err != nil {
			t.Fatal(err)
		}
		br.Add(allocBytes(t, a, 64), 0)
		br.Commit()
		sock2, _ := socketpair(t, unix.SOCK_STREAM)

		s := sqe(t, r)
		s.PrepRecv(sock, allocBytes(t, a, 64), 0, RecvPollFirst)
		s = sqe(t, r)
		s.PrepPollMultishot(sock, unix.POLLIN)
		s = sqe(t, r)
		s.PrepTimeout(ts, 0, 0)
		s = sqe(t, r)
		s.PrepAcceptMultishot(listenerFd(t, ln), unix.SOCK_CLOEXEC)
		s = sqe(t, r)
		s.PrepRecvMultishot(sock2, br.Group(), 0)
		w.Arm(sqe(t, r))
		if _, err := r.Submit(); err != nil {
			t.Fatal(err)
		}
		s = sqe(t, r) // queued, never submitted by the caller
		s.PrepNop()
		if r.InFlight() != 6 {
			t.Errorf("InFlight = %d, want 6", r.InFlight())
		}
		start := time.Now()
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Close took %v", d)
		}
		if r.InFlight() != 0 {
			t.Errorf("InFlight after Close = %d", r.InFlight())
		}
		if err := r.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

func TestArena(t *testing.T) {
	a, err := NewArena(100)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != os.Getpagesize() {
		t.Errorf("Len = %d, want a page", a.Len())
	}
	b1, _ := a.Alloc(3, 0)
	ts := alloc[Timespec](t, a)
	if uintptr(unsafe.Pointer(ts))%8 != 0 || uintptr(unsafe.Pointer(&b1[0]))%16 != 0 {
		t.Error("misaligned allocation")
	}
	if cap(b1) != 3 {
		t.Errorf("cap = %d; an allocation must not reach into the next", cap(b1))
	}
	if _, err := a.Alloc(a.Len(), 0); err == nil {
		t.Error("oversized Alloc succeeded")
	}
	if _, err := a.Alloc(8, 3); err == nil {
		t.Error("Alloc with alignment 3 succeeded")
	}
	a.Reset()
	if b, err := a.Alloc(a.Len(), 1); err != nil || len(b) != a.Len() {
		t.Errorf("Alloc of everything after Reset: %d, %v", len(b), err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(1, 0); err == nil {
		t.Error("Alloc after Close succeeded")
	}
}
