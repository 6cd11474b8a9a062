package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// mqttProxy stands between a node and its MQTT broker, forwarding whole
// packets both ways, so that a test can ask when the broker has read
// everything the node sent it (sync): a PINGREQ goes to the broker
// behind the node's packets, and the broker answers it only once it has
// read them. mosquitto under load reads a client's acknowledgements late
// and forgets the unread ones when the connection breaks; a test that
// needs the broker to have them waits on sync first. Safe for concurrent
// use.
type mqttProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns map[*mqttPipe]bool
	wg    sync.WaitGroup
}

// mqttPipe is one connection through the proxy.
type mqttPipe struct {
	node, broker net.Conn
	wmu          sync.Mutex // whole packets to the broker
	mu           sync.Mutex
	pings        int           // PINGREQs sent to the broker
	pongs        int           // PINGRESPs from it
	answered     chan struct{} // closed and replaced at each PINGRESP
}

// startMQTTProxy listens on a loopback port and forwards every connection
// to the broker at target; it stops when the test ends.
func startMQTTProxy(t *testing.T, target string) *mqttProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &mqttProxy{ln: ln, target: target, conns: map[*mqttPipe]bool{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for c := range p.conns {
			c.node.Close()
			c.broker.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's "127.0.0.1:port".
func (p *mqttProxy) Addr() string { return p.ln.Addr().String() }

// sync returns once the broker has read everything the node sent it
// before the call, on every connection open now, or when timeout passes
// (false).
func (p *mqttProxy) sync(timeout time.Duration) bool {
	p.mu.Lock()
	var open []*mqttPipe
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, c := range open {
		c.wmu.Lock()
		c.mu.Lock()
		c.pings++
		want := c.pings
		c.mu.Unlock()
		_, err := c.broker.Write([]byte{0xc0, 0}) // PINGREQ
		c.wmu.Unlock()
		if err != nil {
			continue // gone: nothing more to read
		}
		for {
			c.mu.Lock()
			done, ch := c.pongs >= want, c.answered
			c.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-deadline.C:
				return false
			}
		}
	}
	return true
}

func (p *mqttProxy) accept() {
	for {
		n, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			n.Close()
			continue
		}
		c := &mqttPipe{node: n, broker: b, answered: make(chan struct{})}
		p.mu.Lock()
		p.conns[c] = true
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Go(func() { c.toBroker() })
		both.Go(func() { c.toNode() })
		p.wg.Go(func() {
			both.Wait()
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
		})
	}
}

// toBroker forwards the node's packets, each whole, counting its PINGREQs.
func (c *mqttPipe) toBroker() {
	defer c.close()
	r := bufio.NewReader(c.node)
	for {
		pk, err := readMQTTPacket(r)
		if err != nil {
			return
		}
		c.wmu.Lock()
		if pk[0]>>4 == 12 {
			c.mu.Lock()
			c.pings++
			c.mu.Unlock()
		}
		_, err = c.broker.Write(pk)
		c.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// toNode forwards the broker's packets, counting its PINGRESPs.
func (c *mqttPipe) toNode() {
	defer c.close()
	r := bufio.NewReader(c.broker)
	for {
		pk, err := readMQTTPacket(r)
		if err != nil {
			return
		}
		if pk[0]>>4 == 13 {
			c.mu.Lock()
			c.pongs++
			close(c.answered)
			c.answered = make(chan struct{})
			c.mu.Unlock()
		}
		if _, err := c.node.Write(pk); err != nil {
			return
		}
	}
}

func (c *mqttPipe) close() {
	c.node.Close()
	c.broker.Close()
}

// readMQTTPacket reads one MQTT packet: its fixed header, its remaining
// length and its body.
func readMQTTPacket(r *bufio.Reader) ([]byte, error) {
	h, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	pk := []byte{h}
	n := 0
	for i := 0; ; i++ {
		b, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		pk = append(pk, b)
		n |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
		if i == 3 {
			return nil, errors.New("mqtt proxy: a remaining length of more than 4 bytes")
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(pk, body...), nil
}
