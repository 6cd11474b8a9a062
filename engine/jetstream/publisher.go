package jetstream

// The publish path.
//
// Order per source. JetStream stores the messages of one connection in
// the order they arrive, but a publish can fail on its own: the stream's
// leader dies and another is elected, a server has no responder for the
// subject for a moment, an acknowledgement is lost with a connection. A
// publish sent again after that lands behind whatever of its source went
// out in the meantime. Pipelining a source's chunks and, after a failure,
// sending the failed one and everything after it again in order under the
// same ids is not enough either: a later chunk that was in flight when an
// earlier one failed may already be stored (chunk k timed out on a dying
// leader while chunk k+1 reached the new one), and nothing can put it back
// behind k. No JetStream header makes a publish wait for another one that
// is still unacknowledged (Nats-Expected-Last-Subject-Sequence needs the
// stream sequence of the previous message, known only from its
// acknowledgement). So a source has at most one publish awaiting its
// acknowledgement: its later chunks wait, held, in the source's queue, and
// the acknowledgement of one sends the next. A publish that fails or
// times out goes again, under its Nats-Msg-Id, before anything later of
// its source. Sources are independent: up to MaxPending publishes of
// different sources are in flight at once, so a node with many sources
// keeps the connection full.
//
// Pipelining one source. A source alone would move one chunk per round
// trip that way. But while the last message the publisher sent is the
// source's own and still in flight, the stream's last message will be
// that one, so the source's next chunk goes at once, with
// Nats-Expected-Last-Msg-Id naming it: JetStream stores it only right
// after it, and rejects it otherwise (the earlier one failed, or another
// message came between). Such a chunk is never sent again with that
// header: a rejected or timed-out one waits until everything before it
// is acknowledged and then goes as a plain publish, under its id. So a
// chunk is stored only after every earlier chunk of its source, whatever
// fails; a fast source alone is pipelined; sources that interleave
// stay one chunk per round trip each, and after a rejection the
// publisher stops pipelining for a second, so another publisher on the
// stream costs little. Only on a server outside any cluster: a
// replicated stream checks the header when it applies a message on
// every replica, not when its leader accepts it, and nats-server 2.15
// stops applying the stream's messages at the first mismatch there.
//
// Duplicates. A publish sent again may have been stored already (its
// acknowledgement was lost, or it was still on its way when it timed
// out). JetStream drops it as a duplicate if it comes within the stream's
// duplicate window of the first; the leader rebuilds that window from its
// store when it is elected, so this holds across leader changes too. Only
// an outage longer than the window (two minutes by default) can store a
// chunk twice, and then next to itself.
//
// Cost. Acknowledgements arrive on one wildcard subscription; each reply
// subject names the publish's slot and the slot's generation, so an
// acknowledgement finds its chunk without a map and a late one for a slot
// already reused is ignored. A slot keeps its message and header between
// uses, one timer serves every deadline, and the NATS connection's write
// buffer is large enough that publishes are copied into it and written by
// its flusher in batches rather than one write per chunk.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
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
	// URL is the NATS server (or comma-separated servers of a cluster).
	// Default nats.DefaultURL (nats://127.0.0.1:4222).
	URL string `yaml:"url"`
	// Subject receives every chunk. Required.
	Subject string `yaml:"subject"`
	// Stream, if set, is created over Subject when it does not exist.
	// An existing stream is used as it is.
	Stream string `yaml:"stream"`
	// Storage is the storage of a stream created for Stream: "file" (the
	// default) or "memory".
	Storage string `yaml:"storage"`
	// Replicas is the replica count of a stream created for Stream, on a
	// cluster. Default 1.
	Replicas int `yaml:"replicas"`
	// DuplicateWindow is the de-duplication window of a stream created
	// for Stream: a chunk sent again within it after its first copy is
	// stored once. Default JetStream's, two minutes.
	DuplicateWindow time.Duration `yaml:"duplicate_window"`
	// MaxPending caps the chunks the publisher holds: those awaiting an
	// acknowledgement and those waiting behind an earlier chunk of their
	// source. Past it, the processing goroutine waits, holding its chunk.
	// Default 256.
	MaxPending int `yaml:"max_pending"`
	// AckTimeout is how long an acknowledgement may take before the chunk
	// is published again (with the same message id). Default 5s.
	AckTimeout time.Duration `yaml:"ack_timeout"`
	// RetryWait is the pause before publishing again after an error.
	// Default 100ms.
	RetryWait time.Duration `yaml:"retry_wait"`
	// NoPipeline sends every source's chunks one per round trip, never a
	// chunk before the previous one of its source is acknowledged. The
	// publisher pipelines only when connected to a server outside any
	// cluster; set this where such a server is a leaf node of a cluster
	// that holds the stream.
	NoPipeline bool `yaml:"no_pipeline"`
	// IDPrefix starts every message id. Default: the host name and the
	// publisher's start time, so that ids of two nodes, or of one node
	// before and after a restart, never meet. A prefix set here must
	// change at every start: ids repeat after a restart (sources and
	// sequence numbers start again), and JetStream drops a repeated id
	// within its duplicate window as a duplicate.
	IDPrefix string `yaml:"id_prefix"`
	// Name is the NATS connection's name. Default "sluice".
	Name string `yaml:"name"`

	// Credentials: at most one of user and password, a token, an NKey
	// seed file, or a creds file (a user JWT with its NKey seed, as nsc
	// writes it). A password or token may come inline, from a file
	// (password_file, token_file: its content, trailing white space
	// trimmed) or from an environment variable (password_env, token_env:
	// its name). Secrets are never logged and print redacted.
	User         string      `yaml:"user"`
	Password     srcs.Secret `yaml:"password"`
	PasswordFile string      `yaml:"password_file"`
	PasswordEnv  string      `yaml:"password_env"`
	Token        srcs.Secret `yaml:"token"`
	TokenFile    string      `yaml:"token_file"`
	TokenEnv     string      `yaml:"token_env"`
	NKeySeedFile string      `yaml:"nkey_seed_file"`
	CredsFile    string      `yaml:"creds_file"`
	// TLS, when set, requires TLS to the servers, verified against
	// tls.ca_file (or the system's roots), with a client certificate if
	// tls.cert_file is set. client_auth does not apply.
	TLS *srcs.TLSConfig `yaml:"tls"`
}

// redactURL hides the passwords and tokens that server URLs may carry
// (nats://user:password@host, nats://token@host) for errors and logs.
func redactURL(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("xxxxx") // a token: nats://token@host
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// authOptions resolves the credentials of a checked Config into NATS
// options. Errors name the YAML keys.
func (c Config) authOptions() ([]nats.Option, error) {
	pw, err := srcs.LoadSecret("password", c.Password, c.PasswordFile, c.PasswordEnv)
	if err != nil {
		return nil, err
	}
	tok, err := srcs.LoadSecret("token", c.Token, c.TokenFile, c.TokenEnv)
	if err != nil {
		return nil, err
	}
	var opts []nats.Option
	kinds := 0
	if c.User != "" || pw != "" {
		if c.User == "" {
			return nil, errors.New("password: set without user")
		}
		kinds++
		opts = append(opts, nats.UserInfo(c.User, pw.Reveal()))
	}
	if tok != "" {
		kinds++
		opts = append(opts, nats.Token(tok.Reveal()))
	}
	if c.NKeySeedFile != "" {
		kinds++
		o, err := nats.NkeyOptionFromSeed(c.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey_seed_file: %w", err)
		}
		opts = append(opts, o)
	}
	if c.CredsFile != "" {
		kinds++
		if _, err := os.Stat(c.CredsFile); err != nil {
			return nil, fmt.Errorf("creds_file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.CredsFile))
	}
	if kinds > 1 {
		return nil, errors.New("user and password, token, nkey_seed_file, creds_file: set one at most")
	}
	if c.TLS != nil {
		tc, err := c.TLS.ClientConfig("")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// Defaults.
const (
	DefaultMaxPending = 256
	DefaultAckTimeout = 5 * time.Second
	DefaultRetryWait  = 100 * time.Millisecond
)

// pipelinePause is how long a rejected pipelined publish stops
// pipelining: something else is publishing into the stream between a
// source's messages.
const pipelinePause = time.Second

// headerExpectLast is JetStream's Nats-Expected-Last-Msg-Id header.
const headerExpectLast = "Nats-Expected-Last-Msg-Id"

// errWrongLastMsgID is JetStream's error code for a publish whose
// Nats-Expected-Last-Msg-Id was not the stream's last message id.
const errWrongLastMsgID = 10070

// writeBuffer is the NATS connection's write buffer: publishes are copied
// into it and its flusher writes them to the socket, several chunks per
// write, without the publishing goroutine waiting on the write.
const writeBuffer = 1 << 20

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
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("jetstream: config: replicas: %d: must be from 0 (default) to 5", c.Replicas)
	case c.DuplicateWindow < 0:
		return c, fmt.Errorf("jetstream: config: duplicate_window: %v: must not be negative", c.DuplicateWindow)
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
	Retries    uint64 // publishes sent again after an error, a timeout or a reconnect
	Pipelined  uint64 // chunks first sent before the previous one of their source was acknowledged
	Rejected   uint64 // pipelined chunks JetStream did not store behind the previous one (sent again later)
	Pending    int    // chunks held: awaiting their acknowledgement or their turn
}

// Publisher publishes chunks to JetStream; its Handle method is an
// engine.Handler. Handle is safe for concurrent use by the engine's
// processing goroutines, which hand it each source's chunks in order.
// Close must come after the engine's Shutdown has returned, when no more
// chunks can arrive.
type Publisher struct {
	cfg   Config
	nc    *nats.Conn
	sub   *nats.Subscription
	inbox string // reply subjects: inbox + a slot's token

	tokens      chan struct{} // one per chunk held: the MaxPending window
	kick        chan struct{} // a deadline earlier than the timer's
	reconnected chan struct{}
	stop        chan struct{} // closed by Close: run returns, Handle refuses
	abort       chan struct{} // closed by Close when its ctx ends
	runDone     chan struct{}
	idle        chan struct{} // closed once nothing is held after Close began

	mu      sync.Mutex
	slots   []slot
	free    []int32
	sources map[srcs.ID]*queue // sources with chunks held
	held    int
	// lastSrc is the source of the last publish sent: while it has a
	// chunk in flight, its next chunk may be pipelined behind it.
	lastSrc   srcs.ID
	lastValid bool
	pauseTill time.Time // no pipelining before then
	solo      bool      // connected to a server outside any cluster: pipelining is safe
	wake      time.Time // when run's timer fires; zero: not armed
	closing   bool      // Close began
	idled     bool      // idle is closed
	aborted   bool      // Close gave up: release nothing more
	closed    bool

	closeOnce sync.Once
	closeErr  error
	onError   func(error)

	published, acked, dups, retries, pipelined, rejected atomic.Uint64

	acks []engine.Chunk // onAck's chunks to release; used by its goroutine only
}

// A slot holds one chunk from Handle until its acknowledgement.
type slot struct {
	c        engine.Chunk
	state    slotState
	gen      uint32    // bumped at every reuse; part of the reply subject
	next     int32     // the next held chunk of the same source, or -1
	deadline time.Time // sent: when the ack is overdue; retry: when to send again
	msg      nats.Msg  // reused: Subject, Reply and Header
	vals     [5]string // the header's values
	failed   bool      // a failure of this chunk was reported: its retries are only counted
}

// firstFailure returns err the first time s's chunk fails, and nil at its
// retries' failures: through a leader election every source's head chunk
// fails at every RetryWait, and the error handler (a log) should hear of
// each chunk once. Stats.Retries counts them all. Called with mu held.
func (s *slot) firstFailure(err error) error {
	if s.failed {
		return nil
	}
	s.failed = true
	return err
}

type slotState uint8

const (
	slotFree    slotState = iota
	slotQueued            // behind an earlier chunk of its source, never sent
	slotSent              // awaiting its acknowledgement
	slotRetry             // the source's head: failed; waiting RetryWait to go again
	slotWaiting           // pipelined and failed: goes again when it is the head
	slotDone              // acknowledged while an earlier chunk of its source is not
)

// queue is a source's held chunks, oldest first: slot indices linked by
// slot.next. The head and the chunks up to last have been sent; those
// after last have not.
type queue struct{ head, tail, last int32 }

// Option configures a Publisher's injected pieces.
type Option func(*Publisher)

// WithErrorHandler receives publish errors that are retried (a lost
// connection, a timeout, a stream without a leader): they are not fatal,
// but worth logging. A chunk's first failure is reported; its further
// retries are only counted (Stats.Retries). Calls come from the publisher's goroutines and from
// the NATS client's; the handler must not call the Publisher.
func WithErrorHandler(f func(error)) Option { return func(p *Publisher) { p.onError = f } }

// New connects to cfg.URL (reconnecting forever after a loss, to any
// server of the list or of the cluster), ensures cfg.Stream if set, and
// starts the goroutine that keeps deadlines.
func New(ctx context.Context, cfg Config, opts ...Option) (*Publisher, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Publisher{
		cfg:         cfg,
		tokens:      make(chan struct{}, cfg.MaxPending),
		kick:        make(chan struct{}, 1),
		reconnected: make(chan struct{}, 1),
		stop:        make(chan struct{}),
		abort:       make(chan struct{}),
		runDone:     make(chan struct{}),
		idle:        make(chan struct{}),
		slots:       make([]slot, cfg.MaxPending),
		free:        make([]int32, cfg.MaxPending),
		sources:     map[srcs.ID]*queue{},
	}
	for _, o := range opts {
		o(p)
	}
	for i := range p.slots {
		p.free[i] = int32(len(p.slots) - 1 - i)
		s := &p.slots[i]
		s.msg.Subject = cfg.Subject
		s.msg.Header = nats.Header{
			jetstream.MsgIDHeader: s.vals[0:1:1],
			HeaderSource:          s.vals[1:2:2],
			HeaderSeq:             s.vals[2:3:3],
		}
	}
	auth, err := cfg.authOptions()
	if err != nil {
		return nil, fmt.Errorf("jetstream: config: %w", err)
	}
	nc, err := nats.Connect(cfg.URL, append(auth, nats.Name(cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(false),
		nats.WriteBufferSize(writeBuffer),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				p.report(fmt.Errorf("jetstream: disconnected: %w", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.mu.Lock()
			p.solo = nc.ConnectedClusterName() == ""
			p.mu.Unlock()
			select {
			case p.reconnected <- struct{}{}:
			default:
			}
		}))...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", redactURL(cfg.URL), err)
	}
	p.nc = nc
	p.mu.Lock()
	p.solo = nc.ConnectedClusterName() == ""
	p.mu.Unlock()
	if cfg.Stream != "" {
		if err := ensureStream(ctx, nc, cfg); err != nil {
			nc.Close()
			return nil, err
		}
	}
	p.inbox = nc.NewInbox() + "."
	p.sub, err = nc.Subscribe(p.inbox+"*", p.onAck)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: subscribe to acknowledgements: %w", err)
	}
	// Unlimited: an acknowledgement dropped as a slow consumer's would
	// only cost a timeout and a resend, but there are never more than
	// MaxPending of them to hold.
	p.sub.SetPendingLimits(-1, -1)
	go p.run()
	return p, nil
}

func ensureStream(ctx context.Context, nc *nats.Conn, cfg Config) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.Stream(ctx, cfg.Stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		if err != nil {
			return fmt.Errorf("jetstream: stream %s: %w", cfg.Stream, err)
		}
		return nil
	}
	sc := jetstream.StreamConfig{Name: cfg.Stream, Subjects: []string{cfg.Subject}, Replicas: cfg.Replicas,
		Duplicates: cfg.DuplicateWindow}
	if cfg.Storage == "memory" {
		sc.Storage = jetstream.MemoryStorage
	}
	if _, err := js.CreateStream(ctx, sc); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("jetstream: create stream %s: %w", cfg.Stream, err)
	}
	return nil
}

// MaxPayload is the largest message the server accepts. A chunk larger
// than that could never be published, so a caller should keep its engine's
// buffers (Config.BufSize) at or below it.
func (p *Publisher) MaxPayload() int64 { return p.nc.MaxPayload() }

// ConnectedURL is the server the publisher is connected to now, or "" while
// it is not connected. Safe for concurrent use.
func (p *Publisher) ConnectedURL() string { return p.nc.ConnectedUrl() }

// MsgID returns the message id of a chunk: prefix, source id, sequence.
func MsgID(prefix string, c *engine.Chunk) string {
	return string(appendMsgID(nil, prefix, c))
}

func appendMsgID(b []byte, prefix string, c *engine.Chunk) []byte {
	b = append(b, prefix...)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(c.Source), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, c.Seq, 10)
}

// Handle publishes c, or queues it behind an earlier chunk of its source
// that awaits its acknowledgement, and releases it once JetStream has
// stored it. Chunks without data (end of stream) are released at once.
// Handle blocks while the publisher holds MaxPending chunks: that is the
// backpressure.
func (p *Publisher) Handle(c engine.Chunk) {
	if len(c.Data) == 0 {
		c.Release()
		return
	}
	select {
	case p.tokens <- struct{}{}:
	case <-p.abort:
		return // Close gave up: the chunk stays held, like every unacknowledged one
	case <-p.stop:
		return // Handle after Close: a misuse, but not a hang
	}
	p.published.Add(1)
	var idBuf [96]byte
	id := string(appendMsgID(idBuf[:0], p.cfg.IDPrefix, &c))

	p.mu.Lock()
	if p.closed || p.aborted {
		p.mu.Unlock()
		<-p.tokens
		return
	}
	i := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	s := &p.slots[i]
	s.c, s.next, s.msg.Data, s.failed = c, -1, c.Data, false
	s.vals[0] = id
	s.vals[1] = c.Name
	s.vals[2] = id[len(id)-len(strconv.AppendUint(idBuf[:0], c.Seq, 10)):]
	switch {
	case c.Flags&srcs.Truncated != 0:
		s.vals[3] = "truncated"
		s.msg.Header[HeaderRecords] = s.vals[3:4:4]
	case c.Flags&srcs.Records != 0:
		s.vals[3] = "whole"
		s.msg.Header[HeaderRecords] = s.vals[3:4:4]
	default:
		delete(s.msg.Header, HeaderRecords)
	}
	// The token names the slot and its generation; an ack carries it back.
	tok := strconv.AppendUint(idBuf[:0], uint64(s.gen)<<32|uint64(i), 36)
	s.msg.Reply = p.inbox + string(tok)
	p.held++
	var err error
	s.state = slotQueued
	if q := p.sources[c.Source]; q != nil {
		p.slots[q.tail].next = i
		q.tail = i
		err = p.pipelineLocked(q, time.Now())
	} else {
		p.sources[c.Source] = &queue{i, i, i}
		err = p.sendLocked(i, "", time.Now())
	}
	p.mu.Unlock()
	if err != nil {
		p.report(err)
	}
}

// pipelineLocked sends q's chunks not yet sent, each behind the one
// before it, while the last publish sent is q's own and in flight.
func (p *Publisher) pipelineLocked(q *queue, now time.Time) error {
	if p.cfg.NoPipeline || !p.solo || now.Before(p.pauseTill) {
		return nil
	}
	for {
		prev := &p.slots[q.last]
		i := prev.next
		if i < 0 || prev.state != slotSent || !p.lastValid || p.lastSrc != prev.c.Source {
			return nil
		}
		p.pipelined.Add(1)
		q.last = i
		if err := p.sendLocked(i, prev.vals[0], now); err != nil {
			return err
		}
	}
}

// sendLocked publishes slot i's chunk: the head of its source's queue
// with expect "", or a chunk pipelined behind the message id expect. NATS
// copies the bytes into its write buffer (or, while reconnecting, its
// reconnect buffer), so the chunk stays the only owner of its bytes
// until it is released.
func (p *Publisher) sendLocked(i int32, expect string, now time.Time) error {
	s := &p.slots[i]
	if expect != "" {
		s.vals[4] = expect
		s.msg.Header[headerExpectLast] = s.vals[4:5:5]
	} else {
		delete(s.msg.Header, headerExpectLast)
	}
	s.state, s.deadline = slotSent, now.Add(p.cfg.AckTimeout)
	p.lastSrc, p.lastValid = s.c.Source, true
	err := p.nc.PublishMsg(&s.msg)
	if err != nil {
		p.lastValid = false
		if expect != "" {
			s.state = slotWaiting
			return nil
		}
		s.state, s.deadline = slotRetry, now.Add(p.cfg.RetryWait)
		err = s.firstFailure(fmt.Errorf("jetstream: publish %s: %w", s.vals[0], err))
	}
	if p.wake.IsZero() || s.deadline.Before(p.wake) {
		p.wake = s.deadline
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	return err
}

// pubAck is JetStream's reply to a publish.
type pubAck struct {
	Stream    string    `json:"stream"`
	Duplicate bool      `json:"duplicate"`
	Error     *apiError `json:"error"`
}

type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%d, error code %d)", e.Description, e.Code, e.ErrCode)
}

// errNoResponders: no server took the publish; the stream has no leader
// (an election) or the subject no stream.
var errNoResponders = errors.New("no responders: the stream has no leader, or the subject no stream")

// onAck handles a reply to a publish, on the subscription's goroutine: an
// acknowledgement releases the chunk and publishes the next of its
// source; an error sends the same chunk again after RetryWait.
func (p *Publisher) onAck(m *nats.Msg) {
	tok, err := strconv.ParseUint(m.Subject[min(len(p.inbox), len(m.Subject)):], 36, 64)
	if err != nil {
		return
	}
	i, gen := int(uint32(tok)), uint32(tok>>32)
	var ackErr error
	stream, duplicate, ok := scanAck(m.Data)
	switch {
	case ok && stream:
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		ackErr = errNoResponders
	case ok:
		ackErr = fmt.Errorf("bad acknowledgement %.100q", m.Data)
	default:
		var ack pubAck
		if err := json.Unmarshal(m.Data, &ack); err != nil {
			ackErr = fmt.Errorf("bad acknowledgement %.100q: %w", m.Data, err)
		} else if ack.Error != nil {
			ackErr = ack.Error
		} else if ack.Stream == "" {
			ackErr = fmt.Errorf("bad acknowledgement %.100q", m.Data)
		}
		duplicate = ack.Duplicate
	}

	p.mu.Lock()
	if i >= len(p.slots) || p.aborted {
		p.mu.Unlock()
		return
	}
	s := &p.slots[i]
	if s.gen != gen || (s.state != slotSent && s.state != slotRetry && s.state != slotWaiting) {
		p.mu.Unlock() // a late reply for a chunk already acknowledged
		return
	}
	q := p.sources[s.c.Source]
	if ackErr != nil {
		if q.head != int32(i) {
			// Pipelined: it goes again, plainly, once it is the head.
			if s.state == slotSent {
				s.state = slotWaiting
			}
			var ae *apiError
			if errors.As(ackErr, &ae) && ae.ErrCode == errWrongLastMsgID {
				p.rejected.Add(1)
				p.pauseTill = time.Now().Add(pipelinePause)
			}
			p.mu.Unlock()
			return
		}
		err := s.firstFailure(fmt.Errorf("jetstream: publish %s: %w", s.vals[0], ackErr))
		if s.state == slotSent {
			s.state, s.deadline = slotRetry, time.Now().Add(p.cfg.RetryWait)
			if p.wake.IsZero() || s.deadline.Before(p.wake) {
				p.wake = s.deadline
				select {
				case p.kick <- struct{}{}:
				default:
				}
			}
		}
		p.mu.Unlock()
		if err != nil {
			p.report(err)
		}
		return
	}
	if duplicate {
		p.dups.Add(1)
	}
	if q.head != int32(i) {
		// Stored behind the earlier ones, whose acknowledgements come
		// first unless one was lost: released with them.
		s.state = slotDone
		p.mu.Unlock()
		return
	}
	// Release the head and the acknowledged chunks after it; send the
	// next unless it is in flight already.
	p.acks = p.acks[:0]
	j := int32(i)
	for {
		t := &p.slots[j]
		p.acks = append(p.acks, t.c)
		if q.last == j {
			q.last = -1
		}
		next := t.next
		t.c, t.state, t.msg.Data = engine.Chunk{}, slotFree, nil
		t.gen++
		p.free = append(p.free, j)
		j = next
		if j < 0 || p.slots[j].state != slotDone {
			break
		}
	}
	now := time.Now()
	switch {
	case j < 0:
		delete(p.sources, p.acks[0].Source)
	default:
		q.head = j
		if h := &p.slots[j]; h.state == slotQueued || h.state == slotWaiting {
			if h.state == slotWaiting {
				p.retries.Add(1)
			}
			if q.last < 0 {
				q.last = j
			}
			err = p.sendLocked(j, "", now)
		}
		if err == nil && q.last >= 0 {
			err = p.pipelineLocked(q, now)
		}
	}
	p.mu.Unlock()

	p.acked.Add(uint64(len(p.acks)))
	for k := range p.acks {
		p.acks[k].Release()
		p.acks[k] = engine.Chunk{}
		<-p.tokens
	}
	// Held until released and counted, so that Close, which waits for
	// nothing to be held, returns after them.
	p.mu.Lock()
	p.held -= len(p.acks)
	if p.closing && p.held == 0 && !p.idled {
		p.idled = true
		close(p.idle)
	}
	p.mu.Unlock()
	if err != nil {
		p.report(err)
	}
}

// run keeps the deadlines: it publishes again the chunks whose
// acknowledgement is overdue or whose retry is due, and after a reconnect
// every chunk awaiting an acknowledgement, which the old connection took
// with it.
func (p *Publisher) run() {
	defer close(p.runDone)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		all := false
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-p.reconnected:
			all = true
		case <-p.kick:
		case <-t.C:
		}
		if next := p.resend(all); !next.IsZero() {
			t.Reset(time.Until(next))
		}
	}
}

// resend publishes again what is due (with all, every chunk awaiting its
// acknowledgement too) and returns the next deadline, or zero if nothing
// waits for one.
func (p *Publisher) resend(all bool) time.Time {
	var errs []error
	p.mu.Lock()
	now := time.Now()
	var next time.Time
	if !p.aborted && !p.closed {
		for i := range p.slots {
			s := &p.slots[i]
			if s.state == slotSent && (all || !s.deadline.After(now)) && p.sources[s.c.Source].head != int32(i) {
				s.state = slotWaiting // pipelined: goes again when it is the head
				continue
			}
			if s.state == slotSent && (all || !s.deadline.After(now)) {
				if !all {
					if err := s.firstFailure(fmt.Errorf("jetstream: publish %s: no acknowledgement within %v", s.vals[0], p.cfg.AckTimeout)); err != nil {
						errs = append(errs, err)
					}
				}
				s.state, s.deadline = slotRetry, now
			}
			if s.state == slotRetry && !s.deadline.After(now) {
				p.retries.Add(1)
				// Of a source, only its head is ever sent or waiting to
				// be sent again: the rest are queued behind it.
				p.wake = now // sendLocked need not kick run: it is here
				if err := p.sendLocked(int32(i), "", now); err != nil {
					errs = append(errs, err)
				}
			}
			if s.state == slotSent || s.state == slotRetry {
				if next.IsZero() || s.deadline.Before(next) {
					next = s.deadline
				}
			}
		}
	}
	p.wake = next
	p.mu.Unlock()
	for _, err := range errs {
		p.report(err)
	}
	return next
}

func (p *Publisher) report(err error) {
	if p.onError != nil {
		p.onError(err)
	}
}

// Stats returns the publisher's counters. Safe for concurrent use.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	return Stats{
		Published: p.published.Load(), Acked: p.acked.Load(), Duplicates: p.dups.Load(),
		Retries: p.retries.Load(), Pipelined: p.pipelined.Load(), Rejected: p.rejected.Load(), Pending: held,
	}
}

// Close waits for every chunk held to be acknowledged, then closes the
// connection. If ctx ends first, the unacknowledged chunks are left
// unreleased (so no checkpoint covers them), a Handle blocked on a full
// window returns, and the error says how many were left. Call it after the
// engine's Shutdown, even one that failed; it is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closing = true
		if p.held == 0 && !p.idled {
			p.idled = true
			close(p.idle)
		}
		p.mu.Unlock()
		select {
		case <-p.idle:
		case <-ctx.Done():
			p.mu.Lock()
			n := p.held
			p.aborted = true
			p.mu.Unlock()
			close(p.abort)
			p.closeErr = fmt.Errorf("jetstream: close: %d chunks never acknowledged: %w", n, ctx.Err())
		}
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.stop)
		<-p.runDone
		p.nc.Close()
	})
	return p.closeErr
}
