package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// Message headers besides Nats-Msg-Id.
const (
	HeaderSource = "Sluice-Source" // the source's name (address or path)
	HeaderSeq    = "Sluice-Seq"    // the chunk's per-source sequence number
	// HeaderRecords is set on chunks of framed sources: "whole" when the
	// chunk holds whole records only, "truncated" when the bytes after its
	// last whole record are part of one its source never finished.
	HeaderRecords = "Sluice-Records"
)

// Config configures a Publisher. It is plain data with YAML tags, as it
// appears under a node's output: jetstream section.
type Config struct {
	// URL is the NATS server (or comma-separated servers). Default
	// nats.DefaultURL (nats://127.0.0.1:4222).
	URL string `yaml:"url"`
	// Subject receives every chunk. Required.
	Subject string `yaml:"subject"`
	// Stream, if set, is created over Subject when it does not exist.
	// An existing stream is used as it is.
	Stream string `yaml:"stream"`
	// Storage is the storage of a stream created for Stream: "file" (the
	// default) or "memory".
	Storage string `yaml:"storage"`
	// MaxPending caps the publishes awaiting an acknowledgement; past it,
	// the processing goroutine waits, holding its chunk. Default 256.
	MaxPending int `yaml:"max_pending"`
	// AckTimeout is how long an acknowledgement may take before the chunk
	// is published again (with the same message id). Default 5s.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// RetryWait is the pause before publishing again after an error.
	// Default 100ms.
	RetryWait time.Duration `yaml:"retry_wait"`
	// IDPrefix starts every message id. Default: the host name and the
	// publisher's start time, so that ids of two nodes, or of one node
	// before and after a restart, never meet. A prefix set here must
	// change at every start: ids repeat after a restart (sources and
	// sequence numbers start again), and JetStream drops a repeated id
	// within its duplicate window as a duplicate.
	IDPrefix string `yaml:"id_prefix"`
	// Name is the NATS connection's name. Default "sluice".
	Name string `yaml:"name"`
}

// Defaults.
const (
	DefaultMaxPending = 256
	DefaultAckTimeout = 5 * time.Second
	DefaultRetryWait  = 100 * time.Millisecond
)

func (c Config) withDefaults() (Config, error) {
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	switch {
	case c.Subject == "":
		return c, errors.New("jetstream: config: subject: required")
	case c.MaxPending < 0:
		return c, fmt.Errorf("jetstream: config: max_pending: %d: must not be negative", c.MaxPending)
	case c.AckTimeout < 0:
		return c, fmt.Errorf("jetstream: config: ack_timeout: %v: must not be negative", c.AckTimeout)
	case c.Storage != "" && c.Storage != "file" && c.Storage != "memory":
		return c, fmt.Errorf("jetstream: config: storage: %q: must be file or memory", c.Storage)
	case c.RetryWait < 0:
		return c, fmt.Errorf("jetstream: config: retry_wait: %v: must not be negative", c.RetryWait)
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.RetryWait == 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.IDPrefix == "" {
		host, _ := os.Hostname()
		c.IDPrefix = host + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	if c.Name == "" {
		c.Name = "sluice"
	}
	return c, nil
}

// Stats counts a publisher's work.
type Stats struct {
	Published  uint64 // chunks handed to Handle with data
	Acked      uint64 // chunks acknowledged and released
	Duplicates uint64 // acks that JetStream flagged as duplicates (a retry of a stored message)
	Retries    uint64 // publishes sent again after an error or a timeout
	Pending    int    // chunks awaiting their acknowledgement
}

// Publisher publishes chunks to JetStream; its Handle method is an
// engine.Handler. Handle is safe for concurrent use by the engine's
// processing goroutines. Close must come after the engine's Shutdown has
// returned, when no more chunks can arrive.
type Publisher struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream

	pending chan *pending // FIFO of publishes awaiting their ack
	closing chan struct{} // closed by Close: finish what is in flight
	abort   chan struct{} // closed by Close when its ctx ends
	done    chan struct{} // closed when the ack waiter has returned

	closeOnce sync.Once
	closeErr  error
	onError   func(error)

	published, acked, dups, retries atomic.Uint64
	inflight                        atomic.Int64
}

type pending struct {
	c   engine.Chunk
	msg *nats.Msg
	fut jetstream.PubAckFuture // nil after a failed publish
}

// Option configures a Publisher's injected pieces.
type Option func(*Publisher)

// WithErrorHandler receives publish errors that are retried (a lost
// connection, a timeout): they are not fatal, but worth logging. Calls
// come from the publisher's ack goroutine.
func WithErrorHandler(f func(error)) Option { return func(p *Publisher) { p.onError = f } }

// New connects to cfg.URL (reconnecting forever after a loss), ensures
// cfg.Stream if set, and starts the goroutine that waits for
// acknowledgements.
func New(ctx context.Context, cfg Config, opts ...Option) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(cfg.URL, nats.Name(cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", cfg.URL, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending+1))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if cfg.Stream != "" {
		if _, err := js.Stream(ctx, cfg.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			sc := jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject}}
			if cfg.Storage == "memory" {
				sc.Storage = jetstream.MemoryStorage
			}
			_, err = js.CreateStream(ctx, sc)
			if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				nc.Close()
				return nil, fmt.Errorf("jetstream: create stream %s: %w", cfg.Stream, err)
			}
		} else if err != nil {
			nc.Close()
			return nil, fmt.Errorf("jetstream: stream %s: %w", cfg.Stream, err)
		}
	}
	p := &Publisher{
		cfg: cfg, nc: nc, js: js,
		pending: make(chan *pending, cfg.MaxPending),
		closing: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}),
	}
	for _, o := range opts {
		o(p)
	}
	go p.waitAcks()
	return p, nil
}

// MaxPayload is the largest message the server accepts. A chunk larger
// than that could never be published, so a caller should keep its engine's
// buffers (Config.BufSize) at or below it.
func (p *Publisher) MaxPayload() int64 { return p.nc.MaxPayload() }

// MsgID returns the message id of a chunk: prefix, source id, sequence.
func MsgID(prefix string, c *engine.Chunk) string {
	return prefix + "." + strconv.FormatUint(uint64(c.Source), 10) + "." + strconv.FormatUint(c.Seq, 10)
}

// Handle publishes c and hands it to the ack waiter, which releases it
// once JetStream has stored it. Chunks without data (end of stream) are
// released at once. Handle blocks while MaxPending publishes await their
// acknowledgements: that is the backpressure.
func (p *Publisher) Handle(c engine.Chunk) {
	if len(c.Data) == 0 {
		c.Release()
		return
	}
	p.published.Add(1)
	msg := &nats.Msg{Subject: p.cfg.Subject, Data: c.Data, Header: nats.Header{
		jetstream.MsgIDHeader: []string{MsgID(p.cfg.IDPrefix, &c)},
		HeaderSource:          []string{c.Name},
		HeaderSeq:             []string{strconv.FormatUint(c.Seq, 10)},
	}}
	switch {
	case c.Flags&srcs.Truncated != 0:
		msg.Header[HeaderRecords] = []string{"truncated"}
	case c.Flags&srcs.Records != 0:
		msg.Header[HeaderRecords] = []string{"whole"}
	}
	pd := &pending{c: c, msg: msg}
	// NATS copies Data into its write buffer, so the chunk stays the only
	// owner of its bytes until it is released after the ack.
	p.inflight.Add(1)
	pd.fut, _ = p.js.PublishMsgAsync(msg)
	select {
	case p.pending <- pd:
	case <-p.abort:
		// Close gave up: the chunk stays held, like every unacknowledged one.
		p.inflight.Add(-1)
	case <-p.done:
		p.inflight.Add(-1) // Handle after Close: a misuse, but not a hang
	}
}

// waitAcks releases chunks in publish order as their acks arrive, and
// publishes again those whose publish failed or timed out. After Close it
// goes on until nothing is in flight.
func (p *Publisher) waitAcks() {
	defer close(p.done)
	closing := p.closing
	for {
		select {
		case pd := <-p.pending:
			ok := p.settle(pd)
			p.inflight.Add(-1)
			if !ok {
				// Aborted: this chunk and those still queued stay held,
				// so nothing (a tail's checkpoint) counts them delivered.
				return
			}
			if closing == nil && p.inflight.Load() == 0 {
				return
			}
		case <-closing:
			if p.inflight.Load() == 0 {
				return
			}
			closing = nil
		case <-p.abort:
			return
		}
	}
}

// settle waits until pd is acknowledged, publishing it again as often as
// needed. It returns false if Close gave up first.
func (p *Publisher) settle(pd *pending) bool {
	for {
		if pd.fut != nil {
			select {
			case ack := <-pd.fut.Ok():
				if ack.Duplicate {
					p.dups.Add(1)
				}
				p.acked.Add(1)
				pd.c.Release()
				return true
			case err := <-pd.fut.Err():
				p.report(fmt.Errorf("jetstream: publish %s: %w", pd.msg.Header.Get(jetstream.MsgIDHeader), err))
			case <-p.abort:
				return false
			}
		}
		t := time.NewTimer(p.cfg.RetryWait)
		select {
		case <-t.C:
		case <-p.abort:
			t.Stop()
			return false
		}
		p.retries.Add(1)
		var err error
		pd.fut, err = p.js.PublishMsgAsync(pd.msg)
		if err != nil {
			p.report(fmt.Errorf("jetstream: publish %s again: %w", pd.msg.Header.Get(jetstream.MsgIDHeader), err))
		}
	}
}

func (p *Publisher) report(err error) {
	if p.onError != nil {
		p.onError(err)
	}
}

// Stats returns the publisher's counters. Safe for concurrent use.
func (p *Publisher) Stats() Stats {
	return Stats{
		Published: p.published.Load(), Acked: p.acked.Load(), Duplicates: p.dups.Load(),
		Retries: p.retries.Load(), Pending: int(p.inflight.Load()),
	}
}

// Close waits for every pending publish to be acknowledged, then closes
// the connection. If ctx ends first, the unacknowledged chunks are left
// unreleased (so no checkpoint covers them), a Handle blocked on a full
// window returns, and the error says how many were left. Call it after the
// engine's Shutdown, even one that failed; it is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		close(p.closing)
		select {
		case <-p.done:
		case <-ctx.Done():
			n := p.inflight.Load()
			close(p.abort)
			<-p.done
			p.closeErr = fmt.Errorf("jetstream: close: %d chunks never acknowledged: %w", n, ctx.Err())
		}
		p.nc.Close()
	})
	return p.closeErr
}
