package arrivals

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/bench/sink"
	"github.com/sluice-io/sluice/engine"
)

// arrivalSink is a sink whose arrivals `arrivals` watches: the probe, an
// engine with one runner, or the gnet sink. The capture, when there is
// one, watches the sink's port from outside, so any sink will do.
type arrivalSink interface {
	addr() string
	// waitAccepted waits until n connections are up, for at most d.
	waitAccepted(ctx context.Context, n int, d time.Duration) error
	// waitEnded waits until every connection has ended, for at most d.
	waitEnded(ctx context.Context, d time.Duration) error
	close()
}

// SinkProbe names the probe sink of `arrivals --sinks`.
const SinkProbe = "probe"

// arrivalProbe is the plain sink of `arrivals`. With a packet capture
// (root or CAP_NET_RAW) it drains the connections as fast as it can;
// without one it reads each connection one message at a time with the
// kernel's receive stamp of every segment (readStamped), which is only
// right while it keeps up, since the kernel merges the segments that wait
// in a receive queue: its reader lag says whether it did. A goroutine per
// connection either way.
type arrivalProbe struct {
	ln      net.Listener
	msgSize int
	stamped bool
	wg      sync.WaitGroup

	mu       sync.Mutex
	conns    [][]arrival
	accepted int
	ended    int
	errs     []error
	changed  chan struct{} // closed and replaced when accepted or ended change
}

// startProbe listens on a loopback port for connections of msgSize-byte
// messages, reading stamps itself when stamped.
func startProbe(msgSize int, stamped bool) (*arrivalProbe, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: arrivals: %w", err)
	}
	p := &arrivalProbe{ln: ln, msgSize: msgSize, stamped: stamped, changed: make(chan struct{})}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *arrivalProbe) addr() string { return p.ln.Addr().String() }

func (p *arrivalProbe) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		i := len(p.conns)
		p.conns = append(p.conns, nil)
		p.accepted++
		p.notify()
		p.mu.Unlock()
		p.wg.Go(func() {
			defer c.Close()
			var as []arrival
			var err error
			if p.stamped {
				as, err = readStamped(c, p.msgSize)
			} else {
				_, err = io.Copy(io.Discard, c)
			}
			p.mu.Lock()
			p.conns[i] = as
			if err != nil {
				p.errs = append(p.errs, err)
			}
			p.ended++
			p.notify()
			p.mu.Unlock()
		})
	}
}

// notify wakes the waiters; p.mu is held.
func (p *arrivalProbe) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// until waits until cond holds (called with p.mu held), for at most d.
func (p *arrivalProbe) until(ctx context.Context, d time.Duration, cond func() bool) error {
	limit := time.After(d)
	for {
		p.mu.Lock()
		ok, ch := cond(), p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-limit:
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Errorf("bench: arrivals: the probe waited %v: %d connections accepted, %d ended", d, p.accepted, p.ended)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *arrivalProbe) waitAccepted(ctx context.Context, n int, d time.Duration) error {
	return p.until(ctx, d, func() bool { return p.accepted >= n })
}

func (p *arrivalProbe) waitEnded(ctx context.Context, d time.Duration) error {
	if err := p.until(ctx, d, func() bool { return p.accepted > 0 && p.ended == p.accepted }); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		return fmt.Errorf("bench: arrivals: %d connections failed, the first: %w", len(p.errs), p.errs[0])
	}
	return nil
}

// stamps returns what every connection read, with stamped reads.
func (p *arrivalProbe) stamps() [][]arrival {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns
}

// close stops listening and waits for every connection's goroutine.
func (p *arrivalProbe) close() {
	p.ln.Close()
	p.wg.Wait()
}

// engineArrivals is an engine with one runner as the sink of `arrivals`,
// in this process.
type engineArrivals struct {
	sk  *bench.SinkEngine
	col *bench.Collector
	n   int
}

// startEngineArrivals starts an engine sink for n connections.
func startEngineArrivals(runner string, f harness.EngineFlags, n int) (*engineArrivals, error) {
	col := bench.NewCollector(0, true, nil)
	sk, err := bench.StartSink(f, runner, []string{"127.0.0.1:0"}, col)
	if err != nil {
		return nil, err
	}
	return &engineArrivals{sk: sk, col: col, n: n}, nil
}

func (e *engineArrivals) addr() string { return e.sk.Addrs()[0] }

func (e *engineArrivals) waitAccepted(ctx context.Context, n int, d time.Duration) error {
	for deadline := time.Now().Add(d); e.sk.Live() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bench: arrivals: only %d of %d connections accepted", e.sk.Live(), n)
		}
	}
	return nil
}

func (e *engineArrivals) waitEnded(ctx context.Context, d time.Duration) error {
	select {
	case <-e.col.Expect(e.n):
		if n := e.col.Errs.Load(); n > 0 {
			return fmt.Errorf("bench: arrivals: %d source errors", n)
		}
		return nil
	case <-time.After(d):
		return fmt.Errorf("bench: arrivals: %d of %d sources ended %v after the client", e.col.Ended.Load(), e.n, d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *engineArrivals) close() { e.sk.Close() }

// gnetArrivals is the gnet sink as the sink of `arrivals`.
type gnetArrivals struct {
	p *peers.GnetProc
}

func (g gnetArrivals) addr() string { return g.p.Addr }

func (g gnetArrivals) waitAccepted(ctx context.Context, n int, d time.Duration) error {
	var st peers.Event
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if err := g.p.Ask(ctx, "stats", "stats", &st); err != nil {
			return err
		}
		if st.Open >= int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: arrivals: gnet accepted %d of %d connections", st.Open, n)
		}
	}
}

func (g gnetArrivals) waitEnded(ctx context.Context, d time.Duration) error {
	select {
	case <-g.p.Ended:
		return nil
	case <-time.After(d):
		return fmt.Errorf("bench: arrivals: gnet's connections still open after %v", d)
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gnetArrivals) close() {
	var sr sink.SinkReport
	g.p.Ask(context.Background(), "stop", "report", &sr)
	g.p.Wait()
}

// startArrivalSink starts the named sink: the probe, a runner, or gnet.
func startArrivalSink(ctx context.Context, name string, c ArrivalsConfig, gnetBin string, stamped bool, ios harness.IO) (arrivalSink, *arrivalProbe, error) {
	switch name {
	case SinkProbe:
		p, err := startProbe(int(c.MsgSize), stamped)
		return p, p, err
	case peers.Gnet:
		p, err := peers.StartGnet(ctx, gnetBin, harness.WireEnv{}, c.Sources, "none", true, nil, ios)
		if err != nil {
			return nil, nil, err
		}
		return gnetArrivals{p}, nil, nil
	case engine.RunnerURing, engine.RunnerEpoll, engine.RunnerGoroutine, engine.RunnerThread:
		e, err := startEngineArrivals(name, c.Engine, c.Sources)
		return e, nil, err
	}
	return nil, nil, fmt.Errorf("bench: arrivals: unknown sink %q", name)
}
