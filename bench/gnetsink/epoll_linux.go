package main

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// epollBufSize is the one buffer every connection of the epoll sink is
// read into: the engine's default pool buffer, as the std sink's.
const epollBufSize = 64 << 10

// epollServer is the simplest sink the kernel allows: one goroutine
// locked to its OS thread, one edge-triggered epoll instance, the
// listener and every connection registered with it, and each ready
// connection read until EAGAIN into one shared buffer, the sink's work
// done on each read while the bytes are in the cache. A connection's
// descriptor is its key: no Go pointer goes into the kernel.
type epollServer struct {
	s     *sink
	bound string
	lfd   int // the listener, non-blocking
	epfd  int
	efd   int           // eventfd that stop writes to end the loop
	done  chan struct{} // closed when the loop has returned
	err   error         // the loop's failure, read after done
}

// epollEvents are a connection's: readable, the peer's half-close, edge
// triggered.
const epollEvents = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET

func serveEpoll(s *sink, listen string) (*epollServer, error) {
	addr, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %v", listen, err)
	}
	family, sa := unix.AF_INET, unix.Sockaddr(&unix.SockaddrInet4{Port: addr.Port})
	if ip4 := addr.IP.To4(); ip4 != nil {
		copy(sa.(*unix.SockaddrInet4).Addr[:], ip4)
	} else if addr.IP != nil {
		family = unix.AF_INET6
		sa6 := &unix.SockaddrInet6{Port: addr.Port}
		copy(sa6.Addr[:], addr.IP.To16())
		sa = sa6
	}
	e := &epollServer{s: s, lfd: -1, epfd: -1, efd: -1, done: make(chan struct{})}
	fail := func(what string, err error) (*epollServer, error) {
		e.closeFDs()
		return nil, fmt.Errorf("listen %s: %s: %v", listen, what, err)
	}
	if e.lfd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
		return fail("socket", err)
	}
	if err := unix.SetsockoptInt(e.lfd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return fail("SO_REUSEADDR", err)
	}
	if err := unix.Bind(e.lfd, sa); err != nil {
		return fail("bind", err)
	}
	if err := unix.Listen(e.lfd, 4096); err != nil {
		return fail("listen", err)
	}
	got, err := unix.Getsockname(e.lfd)
	if err != nil {
		return fail("getsockname", err)
	}
	e.bound = sockaddrString(got)
	if e.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fail("epoll_create1", err)
	}
	if e.efd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fail("eventfd", err)
	}
	for _, fd := range []int{e.lfd, e.efd} {
		if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(fd)}); err != nil {
			return fail("epoll_ctl", err)
		}
	}
	go e.loop()
	return e, nil
}

// loop is the sink: it waits, accepts, and reads, until stop.
func (e *epollServer) loop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(e.done)
	var conns []*stream // by descriptor; nil: not a connection of this sink
	defer func() {
		// stop: every connection still open ends here, counted as closed
		// by the sink rather than by a fault.
		for fd, st := range conns {
			if st != nil {
				unix.Close(fd)
				e.s.closedConn(st, nil)
			}
		}
	}()
	buf := make([]byte, epollBufSize)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(e.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			e.err = fmt.Errorf("epoll_wait: %v", err)
			return
		}
		for _, ev := range events[:n] {
			switch fd := int(ev.Fd); fd {
			case e.efd:
				return
			case e.lfd:
				if conns, err = e.accept(conns); err != nil {
					e.err = err
					return
				}
			default:
				if fd < len(conns) && conns[fd] != nil && e.drain(fd, conns[fd], buf) {
					conns[fd] = nil
				}
			}
		}
	}
}

// accept takes every connection waiting on the listener (edge
// triggered: until EAGAIN) and registers it.
func (e *epollServer) accept(conns []*stream) ([]*stream, error) {
	for {
		fd, sa, err := unix.Accept4(e.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch {
		case errors.Is(err, unix.EAGAIN):
			return conns, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		case errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
			// Out of descriptors: the connection waits in the backlog,
			// and the bench reports it if it never opens.
			return conns, nil
		case err != nil:
			return conns, fmt.Errorf("accept: %v", err)
		}
		st := e.s.opened(sockaddrString(sa))
		if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: epollEvents, Fd: int32(fd)}); err != nil {
			unix.Close(fd)
			e.s.closedConn(st, fmt.Errorf("epoll_ctl: %v", err))
			continue
		}
		for fd >= len(conns) {
			conns = append(conns, nil)
		}
		conns[fd] = st
	}
}

// drain reads fd until EAGAIN, doing the sink's work on every read, and
// reports whether the connection ended (and is closed).
func (e *epollServer) drain(fd int, st *stream, buf []byte) bool {
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case n > 0:
			e.s.traffic(st, buf[:n])
			continue
		case errors.Is(err, unix.EAGAIN):
			return false
		case errors.Is(err, unix.EINTR):
			continue
		}
		// n == 0 with no error is the peer's close; anything else is a
		// fault on the connection.
		unix.Close(fd)
		e.s.closedConn(st, err)
		return true
	}
}

func (e *epollServer) addr() string { return e.bound }

func (e *epollServer) String() string {
	return "a bare epoll loop: one thread, edge triggered, one 64 KiB buffer"
}

// stop ends the loop, closes every connection it holds and the
// listener, and reports the loop's failure if it had one.
func (e *epollServer) stop() error {
	var one [8]byte
	one[0] = 1 // eventfd takes a host-endian uint64; any non-zero value wakes it
	if _, err := unix.Write(e.efd, one[:]); err != nil {
		return fmt.Errorf("stop: %v", err)
	}
	<-e.done
	e.closeFDs()
	if e.err != nil {
		return fmt.Errorf("epoll: %v", e.err)
	}
	return nil
}

// runErr is the loop's failure, delivered once when it ends by itself.
func (e *epollServer) runErr() <-chan error {
	ch := make(chan error, 1)
	go func() {
		<-e.done
		if e.err != nil {
			ch <- e.err
		}
	}()
	return ch
}

func (e *epollServer) closeFDs() {
	for _, fd := range []*int{&e.lfd, &e.epfd, &e.efd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}
