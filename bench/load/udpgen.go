package load

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/srcs"
)

// The built-in generator's UDP load (the hidden `udpgen` subcommand), for
// the shape fio cannot make: many senders, each a socket of its own with
// a port of its own, as a fleet of hosts sending syslog or statsd to one
// collector. fio's net engine runs a thread per job.

// UDPGenMaxSenders bounds --sources of `run --proto udp --client gen`:
// each sender holds a descriptor, and the hard RLIMIT_NOFILE here is
// 20,000.
const UDPGenMaxSenders = 10000

// udpGenStep is how often a paced udpgen sends what has come due.
const udpGenStep = time.Millisecond

// UDPGenConfig configures `udpgen`.
type UDPGenConfig struct {
	Addr     string
	Senders  int
	Duration time.Duration
	MsgSize  int
	// Rate is datagrams per second over all senders; 0: flat out.
	Rate float64
}

// RegisterFlags defines c's flags on fs.
func (c *UDPGenConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "send to `ADDR`")
	fs.IntVar(&c.Senders, "senders", c.Senders, "sockets, each with a port of its own, taking turns")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long to send")
	fs.IntVar(&c.MsgSize, "msg-size", c.MsgSize, "bytes per datagram")
	fs.Float64Var(&c.Rate, "rate", c.Rate, "datagrams per second over all senders (0: flat out)")
}

// Validate checks c, naming the flag at fault.
func (c UDPGenConfig) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("--addr: required")
	case c.Senders < 1 || c.Senders > UDPGenMaxSenders:
		return fmt.Errorf("--senders: %d: must be from 1 to %d", c.Senders, UDPGenMaxSenders)
	case c.Duration <= 0:
		return fmt.Errorf("--duration: %v: must be positive", c.Duration)
	case c.MsgSize < 1 || c.MsgSize > srcs.MaxUDPPayload:
		return fmt.Errorf("--msg-size: %d: must be from 1 to %d", c.MsgSize, srcs.MaxUDPPayload)
	case c.Rate < 0:
		return fmt.Errorf("--rate: %v: must not be negative", c.Rate)
	}
	return nil
}

// UDPGenReport is what `udpgen` writes when it is done.
type UDPGenReport struct {
	Senders int `json:"senders"`
	// Sent is the datagrams the kernel took; Errors those it refused.
	Sent   uint64  `json:"sent"`
	Errors uint64  `json:"errors"`
	FirstE string  `json:"first_error,omitempty"`
	Secs   float64 `json:"seconds"`
	CPUS   float64 `json:"cpu_s"`
}

// RunUDPGen runs `udpgen`: the senders take turns, one datagram each, for
// Duration, paced in udpGenStep steps at Rate (or flat out), and the
// report goes to out.
func RunUDPGen(ctx context.Context, c UDPGenConfig, out io.Writer) error {
	if err := c.Validate(); err != nil {
		return err
	}
	raddr, err := net.ResolveUDPAddr("udp", c.Addr)
	if err != nil {
		return fmt.Errorf("bench: udpgen: %w", err)
	}
	conns := make([]*net.UDPConn, 0, c.Senders)
	defer func() {
		for _, uc := range conns {
			uc.Close()
		}
	}()
	for range c.Senders {
		uc, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			return fmt.Errorf("bench: udpgen: sender %d of %d: %w", len(conns)+1, c.Senders, err)
		}
		conns = append(conns, uc)
	}
	buf := make([]byte, c.MsgSize)
	for i := range buf {
		buf[i] = 'x'
	}
	var rep UDPGenReport
	rep.Senders = c.Senders
	next := 0
	send := func(n uint64) {
		for range n {
			if _, err := conns[next].Write(buf); err != nil {
				rep.Errors++
				if rep.FirstE == "" {
					rep.FirstE = err.Error()
				}
			} else {
				rep.Sent++
			}
			next++
			if next == len(conns) {
				next = 0
			}
		}
	}
	cpu0 := harness.CPUTime()
	start := time.Now()
	end := start.Add(c.Duration)
	var begun uint64 // sent or refused
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		if c.Rate == 0 {
			send(64)
			begun += 64
			continue
		}
		if due := uint64(c.Rate * now.Sub(start).Seconds()); due > begun {
			send(due - begun)
			begun = due
		}
		time.Sleep(udpGenStep - now.Sub(start)%udpGenStep)
	}
	rep.Secs = time.Since(start).Seconds()
	rep.CPUS = (harness.CPUTime() - cpu0).Seconds()
	return json.NewEncoder(out).Encode(rep)
}
