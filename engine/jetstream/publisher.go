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
	// HeaderRecordEnds is set on a message that holds a batch of records
	// (a node's records: batch): where each record ends in the body, as
	// decimal byte offsets, comma-separated.
	HeaderRecordEnds = "Sluice-Record-Ends"
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

// Stats counts a publisher's work, in messages: a chunk handed to Handle
// is one, a chunk handed to Publish as many as its messages.
type Stats struct {
	Published  uint64 // messages handed to Handle or Publish
	Acked      uint64 // messages acknowledged
	Duplicates uint64 // acks that JetStream flagged as duplicates (a retry of a stored message)
	Retries    uint64 // publishes sent again after an error, a timeout or a reconnect
	Pipelined  uint64 // chunks first sent before the previous one of their source was acknowledged
	Rejected   uint64 // pipelined chunks JetStream did not store behind the previous one (sent again later)
	Pending    int    // messages held: awaiting their acknowledgement or their turn
}

// Publisher publishes chunks to JetStream; its Handle method is an
// engine.Handler. Handle is safe for concurrent use by the engine's
// processing goroutines, which hand it each source's chunks in order.
// Close must come after the engine's Shutdown has returned, when no more
// chunks can arrive.
//
// The Publisher is the NATS side of an order (order.go), which decides
// what to publish, release and send again: Handle, the acknowledgement
// subscription and the deadline goroutine each tell it what happened,
// with mu held, and carry out what it decided.
type Publisher struct {
	cfg   Config
	nc    *nats.Conn
	sub   *nats.Subscription
	inbox string // reply subjects: inbox + a slot's token

	tokens      chan struct{} // one per message held: the MaxPending window
	kick        chan struct{} // a deadline earlier than the timer's
	reconnected chan struct{}
	stop        chan struct{} // closed by Close: run returns, Handle refuses
	abort       chan struct{} // closed by Close when its ctx ends
	runDone     chan struct{}
	idle        chan struct{} // closed once nothing is held after Close began

	mu    sync.Mutex
	order *order
	msgs  []outMsg // by slot

	closeOnce sync.Once
	closeErr  error
	onError   func(error)

	published, acked atomic.Uint64

	acks  []engine.Chunk // onAck's chunks to release; used by its goroutine only
	freed int            // onAck's slots released; used by its goroutine only
	spare []*heldChunk   // heldChunks to reuse; guarded by mu
}

// A heldChunk is a chunk from Handle or Publish until every message made
// of it is acknowledged.
type heldChunk struct {
	c engine.Chunk
	// left counts its messages not yet acknowledged, and one more while
	// Publish is still adding them.
	left int
}

// An outMsg holds one message from Handle or Publish until its
// acknowledgement.
type outMsg struct {
	h     *heldChunk
	msg   nats.Msg // reused: Subject, Reply and Header
	vals  [3 + MaxFields]string
	extra []string // the keys of Message.Header set in msg.Header
}

// MaxFields is the most headers a Message may add.
const MaxFields = 8

// A Message is one JetStream message made of part of a chunk: a record,
// an MQTT message, a datagram, or the whole chunk.
type Message struct {
	// Subject is the message's subject; empty means Config.Subject.
	Subject string
	// ID is the message's Nats-Msg-Id. JetStream stores one message of
	// an id within the stream's duplicate window and drops the others as
	// duplicates, so an id must name this message and no other: derived
	// from what its source can replay (a file's identity and the record's
	// offset, a producer's key), or unique to this run (MsgID). Required.
	ID string
	// Data is the message's body. It may alias the chunk's Data.
	Data []byte
	// Header holds up to MaxFields headers besides Nats-Msg-Id and
	// Sluice-Source. Keys must be distinct and canonical
	// (textproto.CanonicalMIMEHeaderKey).
	Header []Field
}

// Field is one header of a Message.
type Field struct{ Key, Value string }

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
	p := newPublisher(cfg)
	for _, o := range opts {
		o(p)
	}
	auth, err := cfg.authOptions()
	if err != nil {
		return nil, fmt.Errorf("jetstream: config: %w", err)
	}
	nc, err := nats.Connect(cfg.URL, append(auth, p.connOptions()...)...)
	if err != nil {
		return nil, fmt.Errorf("jetstream: connect %s: %w", redactURL(cfg.URL), err)
	}
	p.nc = nc
	p.setSolo(nc)
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

// newPublisher returns a Publisher of cfg, not yet connected.
func newPublisher(cfg Config) *Publisher {
	p := &Publisher{
		cfg:         cfg,
		tokens:      make(chan struct{}, cfg.MaxPending),
		kick:        make(chan struct{}, 1),
		reconnected: make(chan struct{}, 1),
		stop:        make(chan struct{}),
		abort:       make(chan struct{}),
		runDone:     make(chan struct{}),
		idle:        make(chan struct{}),
		order:       newOrder(cfg.MaxPending, cfg.AckTimeout, cfg.RetryWait, cfg.NoPipeline),
		msgs:        make([]outMsg, cfg.MaxPending),
	}
	for i := range p.msgs {
		m := &p.msgs[i]
		m.msg.Subject = cfg.Subject
		m.msg.Header = nats.Header{
			jetstream.MsgIDHeader: m.vals[0:1:1],
			HeaderSource:          m.vals[1:2:2],
		}
	}
	return p
}

// connOptions are the NATS connection's options besides credentials.
func (p *Publisher) connOptions() []nats.Option {
	return []nats.Option{nats.Name(p.cfg.Name), nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond), nats.RetryOnFailedConnect(false),
		nats.WriteBufferSize(writeBuffer),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err != nil {
				p.report(fmt.Errorf("jetstream: disconnected: %w", err))
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.setSolo(nc)
			select {
			case p.reconnected <- struct{}{}:
			default:
			}
		})}
}

// setSolo tells the order whether the server nc is connected to is outside
// any cluster, where pipelining is safe.
func (p *Publisher) setSolo(nc *nats.Conn) {
	p.mu.Lock()
	p.order.solo = nc.ConnectedClusterName() == ""
	p.mu.Unlock()
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
	subjects := []string{cfg.Subject}
	if tpl, err := ParseTemplate(cfg.MQTTSubject); err == nil {
		switch f := tpl.Filter(); {
		case subjectCovers(f, cfg.Subject):
			subjects = []string{f}
		case !subjectCovers(cfg.Subject, f):
			subjects = append(subjects, f)
		}
	}
	sc := jetstream.StreamConfig{Name: cfg.Stream, Subjects: subjects, Replicas: cfg.Replicas,
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

// IDPrefix returns the prefix of the ids Handle gives chunks
// (Config.IDPrefix, or its default).
func (p *Publisher) IDPrefix() string { return p.cfg.IDPrefix }

func appendMsgID(b []byte, prefix string, c *engine.Chunk) []byte {
	b = append(b, prefix...)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(c.Source), 10)
	b = append(b, '.')
	return strconv.AppendUint(b, c.Seq, 10)
}

// Handle publishes c as one message, under the id MsgID gives it with
// Sluice-Seq (its sequence number) and, for a framed source,
// Sluice-Records headers; see Publish.
func (p *Publisher) Handle(c engine.Chunk) {
	if len(c.Data) == 0 {
		c.Release()
		return
	}
	var idBuf [96]byte
	id := string(appendMsgID(idBuf[:0], p.cfg.IDPrefix, &c))
	var seqBuf [20]byte
	fields := [2]Field{{HeaderSeq, id[len(id)-len(strconv.AppendUint(seqBuf[:0], c.Seq, 10)):]}}
	hdr := fields[:1]
	switch {
	case c.Flags&srcs.Truncated != 0:
		fields[1] = Field{HeaderRecords, "truncated"}
		hdr = fields[:2]
	case c.Flags&srcs.Records != 0:
		fields[1] = Field{HeaderRecords, "whole"}
		hdr = fields[:2]
	}
	msgs := [1]Message{{ID: id, Data: c.Data, Header: hdr}}
	p.Publish(c, msgs[:])
}

// Publish publishes msgs, made of c, in their order, and releases c once
// JetStream has stored every one of them. Each message is published, or
// queued behind an earlier message of its source that awaits its
// acknowledgement, as soon as the window has room: Publish blocks while
// the publisher holds MaxPending messages (that is the backpressure), and
// returns once it has handed over the last one. msgs is not kept. A chunk
// without data (end of stream), or without messages, is released at
// once.
func (p *Publisher) Publish(c engine.Chunk, msgs []Message) {
	if len(c.Data) == 0 || len(msgs) == 0 {
		c.Release()
		return
	}
	p.mu.Lock()
	h := p.newHeld(c)
	p.mu.Unlock()
	for len(msgs) > 0 {
		// One token waited for, then as many more as are free.
		select {
		case p.tokens <- struct{}{}:
		case <-p.abort:
			return // Close gave up: the chunk stays held, like every unacknowledged one
		case <-p.stop:
			return // Publish after Close: a misuse, but not a hang
		}
		k := 1
	more:
		for k < len(msgs) {
			select {
			case p.tokens <- struct{}{}:
				k++
			default:
				break more
			}
		}
		p.published.Add(uint64(k))
		p.mu.Lock()
		added := 0
		for _, m := range msgs[:k] {
			i := p.order.add(c.Source)
			if i < 0 {
				break
			}
			h.left++
			p.fill(i, h, &m)
			added++
		}
		errs := p.stepLocked(time.Now())
		p.mu.Unlock()
		p.reportAll(errs)
		if added < k {
			for range k - added {
				<-p.tokens
			}
			return // Close ended: the chunk stays held
		}
		msgs = msgs[k:]
	}
	p.mu.Lock()
	h.left-- // every message added
	done := h.left == 0
	if done {
		p.putHeld(h)
	}
	p.mu.Unlock()
	if done {
		c.Release()
	}
}

// newHeld returns a heldChunk for c, counting Publish's own reference.
// Called with mu held.
func (p *Publisher) newHeld(c engine.Chunk) *heldChunk {
	var h *heldChunk
	if n := len(p.spare); n > 0 {
		h, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		h = &heldChunk{}
	}
	h.c, h.left = c, 1
	return h
}

// putHeld keeps h for reuse. Called with mu held.
func (p *Publisher) putHeld(h *heldChunk) {
	h.c = engine.Chunk{}
	p.spare = append(p.spare, h)
}

// fill readies slot i's message to publish m, made of h's chunk. Called
// with mu held.
func (p *Publisher) fill(i int32, h *heldChunk, m *Message) {
	om := &p.msgs[i]
	om.h = h
	om.msg.Subject = m.Subject
	if om.msg.Subject == "" {
		om.msg.Subject = p.cfg.Subject
	}
	om.msg.Data = m.Data
	om.vals[0] = m.ID
	om.vals[1] = h.c.Name
	for _, k := range om.extra {
		delete(om.msg.Header, k)
	}
	om.extra = om.extra[:0]
	for j, f := range m.Header[:min(len(m.Header), MaxFields)] {
		om.vals[3+j] = f.Value
		om.msg.Header[f.Key] = om.vals[3+j : 4+j : 4+j]
		om.extra = append(om.extra, f.Key)
	}
	// The token names the slot and its generation; an ack carries it back.
	var tokBuf [20]byte
	tok := strconv.AppendUint(tokBuf[:0], uint64(p.order.gen(i))<<32|uint64(i), 36)
	om.msg.Reply = p.inbox + string(tok)
}

// stepLocked carries out what the order decided: it makes the publishes,
// kicks run when a deadline moved earlier, and returns the failures to
// report once mu is released. Called with mu held.
func (p *Publisher) stepLocked(now time.Time) []error {
	for snd, ok := p.order.next(now); ok; snd, ok = p.order.next(now) {
		p.order.published(snd, p.publish(snd), now)
	}
	if p.order.takeKick() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	var errs []error
	for _, r := range p.order.takeReports() {
		errs = append(errs, fmt.Errorf("jetstream: publish %s: %w", p.msgs[r.slot].vals[0], r.cause))
	}
	return errs
}

// publish sends snd's chunk: plainly, or behind the message of slot
// snd.expect. NATS copies the bytes into its write buffer (or, while
// reconnecting, its reconnect buffer), so the chunk stays the only owner
// of its bytes until it is released. Called with mu held.
func (p *Publisher) publish(snd send) error {
	m := &p.msgs[snd.slot]
	if snd.expect >= 0 {
		m.vals[2] = p.msgs[snd.expect].vals[0]
		m.msg.Header[headerExpectLast] = m.vals[2:3:3]
	} else {
		delete(m.msg.Header, headerExpectLast)
	}
	return p.nc.PublishMsg(&m.msg)
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
// acknowledgement releases the chunk (and those acknowledged behind it)
// and publishes the next of its source; an error sends the same chunk
// again after RetryWait.
func (p *Publisher) onAck(m *nats.Msg) {
	tok, err := strconv.ParseUint(m.Subject[min(len(p.inbox), len(m.Subject)):], 36, 64)
	if err != nil {
		return
	}
	i, gen := int(uint32(tok)), uint32(tok>>32)
	duplicate, ackErr := readAck(m)

	p.mu.Lock()
	now := time.Now()
	if ackErr != nil {
		p.order.nack(i, gen, ackErr, wrongLastMsgID(ackErr), now)
	} else {
		for _, j := range p.order.ack(i, gen, duplicate) {
			om := &p.msgs[j]
			p.freed++
			if om.h.left--; om.h.left == 0 {
				p.acks = append(p.acks, om.h.c)
				p.putHeld(om.h)
			}
			om.h, om.msg.Data = nil, nil
		}
	}
	errs := p.stepLocked(now)
	p.mu.Unlock()
	if p.freed > 0 {
		p.release()
	}
	p.reportAll(errs)
}

// readAck reads a reply to a publish: nil for an acknowledgement (and
// whether JetStream had the message already), or why it is not one.
func readAck(m *nats.Msg) (duplicate bool, err error) {
	stream, duplicate, ok := scanAck(m.Data)
	switch {
	case ok && stream:
		return duplicate, nil
	case len(m.Data) == 0 && m.Header.Get("Status") == "503":
		return false, errNoResponders
	case ok:
		return false, fmt.Errorf("bad acknowledgement %.100q", m.Data)
	}
	var ack pubAck
	switch err := json.Unmarshal(m.Data, &ack); {
	case err != nil:
		return false, fmt.Errorf("bad acknowledgement %.100q: %w", m.Data, err)
	case ack.Error != nil:
		return false, ack.Error
	case ack.Stream == "":
		return false, fmt.Errorf("bad acknowledgement %.100q", m.Data)
	}
	return ack.Duplicate, nil
}

// wrongLastMsgID reports whether JetStream refused a pipelined publish
// because the stream's last message was not the one it named.
func wrongLastMsgID(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.ErrCode == errWrongLastMsgID
}

// release hands the chunks in p.acks, every message of which is
// acknowledged, back to their owner and frees the places of the p.freed
// messages acknowledged in the window. They count as held until then, so
// that Close, which waits for nothing to be held, returns after them.
func (p *Publisher) release() {
	p.acked.Add(uint64(p.freed))
	for k := range p.acks {
		p.acks[k].Release()
		p.acks[k] = engine.Chunk{}
	}
	for range p.freed {
		<-p.tokens
	}
	p.mu.Lock()
	idle := p.order.settle(p.freed)
	p.mu.Unlock()
	p.acks, p.freed = p.acks[:0], 0
	if idle {
		close(p.idle)
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
	p.mu.Lock()
	p.order.tick(all)
	errs := p.stepLocked(time.Now())
	next := p.order.wake
	p.mu.Unlock()
	p.reportAll(errs)
	return next
}

func (p *Publisher) report(err error) {
	if p.onError != nil {
		p.onError(err)
	}
}

func (p *Publisher) reportAll(errs []error) {
	for _, err := range errs {
		p.report(err)
	}
}

// Stats returns the publisher's counters. Safe for concurrent use.
func (p *Publisher) Stats() Stats {
	p.mu.Lock()
	o := p.order
	st := Stats{Duplicates: o.duplicates, Retries: o.retries, Pipelined: o.pipelined, Rejected: o.rejected,
		Pending: o.held}
	p.mu.Unlock()
	st.Published, st.Acked = p.published.Load(), p.acked.Load()
	return st
}

// Close waits for every message held to be acknowledged, then closes the
// connection. If ctx ends first, the chunks of unacknowledged messages
// are left unreleased (so no checkpoint covers them), a Handle or Publish
// blocked on a full window returns, and the error says how many messages
// were left. Call it after the
// engine's Shutdown, even one that failed; it is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		idle := p.order.beginClose()
		p.mu.Unlock()
		if idle {
			close(p.idle)
		}
		select {
		case <-p.idle:
		case <-ctx.Done():
			p.mu.Lock()
			n := p.order.abort()
			p.mu.Unlock()
			close(p.abort)
			p.closeErr = fmt.Errorf("jetstream: close: %d messages never acknowledged: %w", n, ctx.Err())
		}
		p.mu.Lock()
		p.order.shut()
		p.mu.Unlock()
		close(p.stop)
		<-p.runDone
		p.nc.Close()
	})
	return p.closeErr
}
