package load

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
)

// HoldConfig is the hold command: idle TCP connections opened to a sink
// that runs on its own (a node, a sink under test) and held open, sending
// nothing, until the command is interrupted. It is the independent client
// an operator measures idle memory with; the idle command measures the
// same with a sink of its own making.
type HoldConfig struct {
	// To are the sink's listeners; From the local addresses the
	// connections come from. Connection i goes from From[i%len(From)] to
	// To[i/len(From)%len(To)], so each pair carries an equal share and
	// needs no more local ports than the kernel's ephemeral range.
	To, From report.StringList
	Conns    int
}

// DefaultHoldConfig returns the defaults documented on the flags.
func DefaultHoldConfig() HoldConfig {
	return HoldConfig{From: report.StringList{"127.0.0.1"}}
}

// RegisterFlags defines c's flags on fs.
func (c *HoldConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(&c.To, "to", "comma-separated listener addresses (host:port) to connect to, in turn")
	fs.Var(&c.From, "from", "comma-separated local addresses to connect from, in turn (on loopback, 127.0.0.x each give another range of local ports)")
	fs.IntVar(&c.Conns, "conns", 0, "idle connections to open and hold")
}

// Validate checks c, naming the flag at fault.
func (c HoldConfig) Validate() error {
	if len(c.To) == 0 {
		return errors.New("--to: at least one listener address")
	}
	for _, a := range c.To {
		if _, err := net.ResolveTCPAddr("tcp", a); err != nil {
			return fmt.Errorf("--to: %q: %v", a, err)
		}
	}
	if len(c.From) == 0 {
		return errors.New("--from: at least one local address")
	}
	for _, a := range c.From {
		if net.ParseIP(a) == nil {
			return fmt.Errorf("--from: %q: not an IP address", a)
		}
	}
	if c.Conns < 1 {
		return fmt.Errorf("--conns: %d: must be at least 1", c.Conns)
	}
	return nil
}

// holdFDMargin is what a hold process keeps of its descriptors for
// itself (the runtime's, standard streams).
const holdFDMargin = 32

// Hold opens c.Conns connections, reports on ios.Err as they open, then
// holds them until ctx ends, and closes them. A connection the sink
// refuses or a local port shortage stops it with an error that says which
// pair failed after how many.
func Hold(ctx context.Context, c HoldConfig, ios harness.IO) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(c.Conns)+holdFDMargin > lim.Cur {
		return fmt.Errorf("--conns: %d: more than this process's descriptor limit allows (RLIMIT_NOFILE %d, hard %d); run several hold processes, each with its own --from addresses",
			c.Conns, lim.Cur, lim.Max)
	}
	conns := make([]net.Conn, 0, c.Conns)
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	dialers := make([]net.Dialer, len(c.From))
	for i, a := range c.From {
		dialers[i].LocalAddr = &net.TCPAddr{IP: net.ParseIP(a)}
	}
	start, last := time.Now(), time.Now()
	for i := range c.Conns {
		from, to := i%len(c.From), i/len(c.From)%len(c.To)
		cn, err := dialers[from].DialContext(ctx, "tcp", c.To[to])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			hint := ""
			if errors.Is(err, syscall.EADDRNOTAVAIL) {
				hint = " (out of local ports: give more --from addresses or --to listeners)"
			}
			return fmt.Errorf("connection %d of %d, from %s to %s: %w%s", i+1, c.Conns, c.From[from], c.To[to], err, hint)
		}
		conns = append(conns, cn)
		if now := time.Now(); now.Sub(last) >= 5*time.Second {
			fmt.Fprintf(ios.Err, "sluice-bench hold: %s of %s connections open\n", humanize.Comma(int64(len(conns))), humanize.Comma(int64(c.Conns)))
			last = now
		}
	}
	fmt.Fprintf(ios.Err, "sluice-bench hold: holding %s connections (opened in %.1fs) until interrupted\n",
		humanize.Comma(int64(len(conns))), time.Since(start).Seconds())
	<-ctx.Done()
	return nil
}
