package main

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// ackProxy stands between a node and its NATS server and, while held,
// holds back what the server sends (JetStream's acknowledgements among
// it): the server stores what the node publishes, and the node never
// hears so. A node killed then has had its messages stored but has not
// released their chunks: no checkpoint moved past them, no PUBACK went to
// the broker; what the source gives again after the restart must find
// the ids it had. Swallowing, it drops what the node sends instead, its
// publishes among it: a node killed then has read messages JetStream
// never stored, and must not have acknowledged them to their source.
// Safe for concurrent use.
type ackProxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	held      bool
	swallow   bool
	swallowed int // publishes dropped while swallowing
	wake      *sync.Cond
	conns     map[net.Conn]bool
	wg        sync.WaitGroup
}

// startAckProxy listens on a loopback port and forwards every connection
// to target; it stops when the test ends.
func startAckProxy(t *testing.T, target string) *ackProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &ackProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wake = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's address as a NATS URL.
func (p *ackProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// hold stops forwarding what the server sends, until release.
func (p *ackProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// swallowPublishes drops what the node sends from now on, counting its
// publishes, until release, which then cuts every connection: what was
// dropped is lost, as it is when the node dies.
func (p *ackProxy) swallowPublishes() {
	p.mu.Lock()
	p.swallow, p.swallowed = true, 0
	p.mu.Unlock()
}

// swallowedPublishes returns how many publishes (NATS PUB or HPUB
// commands) were dropped since swallowPublishes.
func (p *ackProxy) swallowedPublishes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.swallowed
}

// release forwards again; with drop (always, after swallowPublishes), it
// first cuts every connection, so what was held back is lost as it is
// when the node dies.
func (p *ackProxy) release(drop bool) {
	p.mu.Lock()
	if drop || p.swallow {
		for c := range p.conns {
			c.Close()
		}
	}
	p.held, p.swallow = false, false
	p.wake.Broadcast()
	p.mu.Unlock()
}

func (p *ackProxy) close() {
	p.ln.Close()
	p.release(true)
	p.wg.Wait()
}

func (p *ackProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c, false) })
		p.wg.Go(func() { p.pipe(c, s, true) })
	}
}

// pipe copies from src to dst; fromServer copies wait while held, and
// the others are dropped while swallowing.
func (p *ackProxy) pipe(dst, src net.Conn, fromServer bool) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.wake.Broadcast()
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && fromServer {
			p.mu.Lock()
			for p.held && p.conns[dst] {
				p.wake.Wait()
			}
			gone := !p.conns[dst]
			p.mu.Unlock()
			if gone {
				return
			}
		}
		if n > 0 && !fromServer {
			p.mu.Lock()
			swallow := p.swallow
			if swallow {
				// A command split across two reads is missed: the count
				// is a lower bound.
				p.swallowed += bytes.Count(buf[:n], []byte("PUB "))
			}
			p.mu.Unlock()
			if swallow {
				n = 0
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
