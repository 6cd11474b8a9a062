package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"

	// TLS and the PROXY protocol, for the node file's tls and proxy_protocol keys.
	_ "github.com/sluice-io/sluice/srcs/trust"
)

// Source states as /healthz and the status line name them.
const (
	stateOpening = "opening" // handed to the engine, not open yet
	stateWaiting = "waiting" // a tail waiting for its file to appear
	stateRunning = "running" // open (a listener: listening)
	stateDone    = "done"    // ended cleanly (a file read to its end)
	stateStopped = "stopped" // stopped by a reload or the drain
	stateFailed  = "failed"  // ended on an error it cannot recover from
)

// entry is one source of the node file, as the node runs it.
type entry struct {
	index  int
	cfg    Source
	key    string // the entry's YAML, which a reload compares
	name   string
	framer srcs.Framer

	// Set once when the entry is added; read-only after.
	ln   *srcs.Listener
	tail *srcs.Tail
	addr string

	// connsFailed counts a listener's connections that ended on an
	// error (a reset, a read error), as their end-of-stream chunks say.
	connsFailed atomic.Uint64
	// rateHolds and rateHeld sum the rate-limit holds of a listener's
	// connections that ended, as their end-of-stream chunks say; those
	// of its live ones are read at each scrape. Written under Node.idMu,
	// with the connection's id leaving byID, so that a scrape counts a
	// connection once, live or ended.
	rateHolds atomic.Uint64
	rateHeld  atomic.Int64 // nanoseconds
	// rateShown is what the last scrape showed of those sums, under mu:
	// a connection that has ended, but whose end-of-stream chunk the
	// node has not handled yet, is in neither, and a counter must not
	// go down meanwhile.
	rateShown struct {
		holds uint64
		held  time.Duration
	}

	// For the jetstream output: the namespace of the ids a producer's key
	// gives (msg_id), the count of messages without a usable key, and an
	// MQTT session's ids (nil at QoS 0).
	keyNS      string
	keyMissing atomic.Uint64
	mqttIDs    *jetstream.MQTTIDs

	mu      sync.Mutex
	id      srcs.ID // the engine's id, for a source that is not a listener
	hasID   bool
	state   string
	err     error // the last error, for /healthz
	conns   int   // a listener's live connections, from accept to end of stream (their ids are in Node.byID)
	stopped bool
	cancel  context.CancelFunc // ends a wait for a file
}

// listen is a listener entry's address or socket path as the node file
// writes it.
func (en *entry) listen() string {
	switch {
	case en.cfg.TCP != nil:
		return en.cfg.TCP.Listen
	case en.cfg.Unix != nil:
		return en.cfg.Unix.Listen
	}
	return ""
}

func (en *entry) setErr(err error) {
	en.mu.Lock()
	en.err = err
	en.mu.Unlock()
}

func (en *entry) setState(s string) {
	en.mu.Lock()
	en.state = s
	en.mu.Unlock()
}

func (en *entry) status() (string, error) {
	en.mu.Lock()
	defer en.mu.Unlock()
	return en.state, en.err
}

func entryKey(s Source) string {
	b, _ := yaml.Marshal(s)
	return string(b)
}

// add opens source i and hands it to the engine. It fails only for what
// an operator must fix: a listener that cannot bind, a file or tail that
// cannot be read, a checkpoint that cannot be written.
func (n *Node) add(i int, s Source) error {
	kind := s.Kind()
	en := &entry{index: i, cfg: s, key: entryKey(s), name: s.Name(), state: stateOpening}
	fail := func(err error) error { return fmt.Errorf("sources[%d] (%s): %w", i, en.name, err) }
	var opts []engine.SourceOption
	if s.Flush > 0 {
		opts = append(opts, engine.WithFlush(s.Flush))
	}
	if s.RateLimit != nil {
		opts = append(opts, engine.WithRateLimit(s.RateLimit.BytesPerSecond, s.RateLimit.Burst))
	}
	if s.IdleTimeout > 0 {
		opts = append(opts, engine.WithIdleTimeout(s.IdleTimeout))
	}
	framer, err := srcs.ParseFraming(s.Framing) // checked by Load
	if err != nil {
		return fail(err)
	}
	en.framer = framer
	if framer != nil {
		opts = append(opts, engine.WithFraming(framer))
	}
	if err := n.prepareIDs(en); err != nil {
		return fail(err)
	}
	n.mu.Lock()
	n.entries = append(n.entries, en)
	n.mu.Unlock()

	var src srcs.Source
	switch {
	case s.TCP != nil, s.Unix != nil:
		var ln *srcs.Listener
		if s.TCP != nil {
			lc := s.TCP.ListenerConfig
			lc.Logger, lc.Framer = n.log, framer
			ln, err = srcs.ListenTCP(s.TCP.Listen, lc)
		} else {
			lc := s.Unix.ListenerConfig
			lc.Logger, lc.Framer = n.log, framer
			ln, err = srcs.ListenUnix(s.Unix.Listen, lc)
		}
		if err != nil {
			return fail(listenError(en.listen(), err))
		}
		en.ln, en.addr = ln, kind+"://"+ln.Addr().String()
		// The engine announces each connection's id as it accepts it,
		// so the node knows every connection of the listener (one that
		// never sends included) before its first chunk or error.
		if err := n.e.AddListener(ln, append(opts, engine.WithAdded(n.accepted(en)))...); err != nil {
			ln.Close()
			return fail(err)
		}
		en.setState(stateRunning)
		return nil
	case s.UDP != nil:
		var u *srcs.UDPSource
		u, err = srcs.ListenUDP(*s.UDP)
		if err != nil {
			return fail(listenError(s.UDP.Addr, err))
		}
		en.addr = "udp://" + u.LocalAddr().String()
		src = u
	case s.TCPClient != nil:
		src, err = srcs.NewTCPClient(*s.TCPClient)
	case s.UnixClient != nil:
		src, err = srcs.NewUnixClient(*s.UnixClient)
	case s.File != nil:
		if err := checkReadable(s.File.Path); err != nil {
			return fail(err)
		}
		src, err = srcs.NewFile(*s.File)
	case s.Tail != nil:
		missing, cerr := checkTail(s.Tail)
		if cerr != nil {
			return fail(cerr)
		}
		tc := s.Tail.TailConfig
		tc.Logger = n.log
		var t *srcs.Tail
		if missing {
			// Whatever is written before the tail opens is read:
			// the file is new, so its start is new data.
			tc.FromStart = true
		}
		if t, err = srcs.NewTail(tc); err != nil {
			return fail(err)
		}
		en.tail = t
		if missing {
			n.waitForFile(en, t, tc.Poll, opts)
			return nil
		}
		src = t
	case s.MQTT != nil:
		src, err = mqtt.NewMQTT(*s.MQTT)
	}
	if err != nil {
		return fail(err)
	}
	return n.addSource(en, src, opts)
}

// prepareIDs readies what the jetstream output needs to give en's
// messages their ids: the namespace of a producer's keys, and for an MQTT
// session at QoS 1 or 2 the ids of its recent messages, read back from
// the stream, so that the broker's redelivery of one is stored once.
func (n *Node) prepareIDs(en *entry) error {
	j, ok := n.out.(*jsOutput)
	if !ok {
		return nil
	}
	s := en.cfg
	en.keyNS = "key." + strings.ReplaceAll(en.name, " ", ".") + "."
	if s.MQTT == nil || s.MQTT.QoS == 0 {
		return nil
	}
	en.mqttIDs = jetstream.NewMQTTIDs(mqttSession(s.MQTT))
	ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
	defer cancel()
	start := time.Now()
	read, err := j.pub.LoadMQTTIDs(ctx, j.tpl.Filter(), en.mqttIDs)
	if err != nil {
		return fmt.Errorf("output.jetstream: reading back the session's recent messages: %w", err)
	}
	n.log.Info("mqtt session's recent messages read back", "source", en.name, "messages", read,
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// mqttSession names an MQTT session: the broker and the client identifier.
func mqttSession(m *mqtt.MQTTConfig) string { return m.Broker + "/" + m.ClientID }

// addSource hands src to the engine, which announces its id before its
// first chunk or error, so the handler never sees the id unknown.
func (n *Node) addSource(en *entry, src srcs.Source, opts []engine.SourceOption) error {
	added := engine.WithAdded(func(id srcs.ID, _ srcs.Source) {
		n.idMu.Lock()
		n.byID[id] = en
		n.idMu.Unlock()
		en.mu.Lock()
		en.id, en.hasID = id, true
		if en.state == stateOpening || en.state == stateWaiting {
			en.state = stateOpening
		}
		en.mu.Unlock()
	})
	if _, err := n.e.AddSource(src, append(opts, added)...); err != nil {
		src.Close()
		en.setState(stateFailed)
		en.setErr(err)
		return fmt.Errorf("sources[%d] (%s): %w", en.index, en.name, err)
	}
	return nil
}

// accepted returns the hook that notes each connection the listener of
// en accepts. A connection accepted while a reload stops the listener is
// stopped at once.
func (n *Node) accepted(en *entry) func(srcs.ID, srcs.Source) {
	return func(id srcs.ID, _ srcs.Source) {
		n.idMu.Lock()
		n.byID[id] = en
		n.idMu.Unlock()
		en.mu.Lock()
		en.conns++
		stopped := en.stopped
		en.mu.Unlock()
		if stopped {
			n.e.StopSource(id)
		}
	}
}

// checkReadable says whether path is a regular file this process can read.
func checkReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (%v)", path, fi.Mode().Type())
	}
	return nil
}

// checkTail checks what a tail needs before it opens: its file readable
// (or missing, with wait_for_file), its checkpoint readable if it exists,
// and the checkpoint's directory writable, since a tail whose checkpoint
// can never be saved would re-read everything after a restart.
func checkTail(t *Tail) (missing bool, err error) {
	if err := checkReadable(t.Path); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		if !t.WaitForFile {
			return false, fmt.Errorf("%w (set wait_for_file: true to start without it and wait for it)", err)
		}
		missing = true
	}
	if t.Checkpoint == "" {
		return missing, nil
	}
	if err := checkCheckpointDir(t.Checkpoint); err != nil {
		return missing, err
	}
	ck, _ := srcs.NewCheckpoint(t.Checkpoint, t.Path)
	if _, err := ck.Load(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return missing, fmt.Errorf("checkpoint: %w", err)
	}
	return missing, nil
}

// waitForFile looks for a tail's file every poll interval until it
// appears, then hands the tail to the engine. It says once that it waits.
func (n *Node) waitForFile(en *entry, t *srcs.Tail, poll time.Duration, opts []engine.SourceOption) {
	if poll <= 0 {
		poll = srcs.DefaultTailPoll
	}
	ctx, cancel := context.WithCancel(n.ctx)
	en.mu.Lock()
	en.state, en.cancel = stateWaiting, cancel
	en.mu.Unlock()
	n.log.Info("waiting for the file to appear", "source", en.name, "poll", poll)
	n.wg.Go(func() {
		defer cancel()
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				en.setState(stateStopped)
				return
			case <-tick.C:
			}
			if _, err := os.Stat(en.cfg.Tail.Path); err != nil {
				continue
			}
			n.log.Info("the file appeared; following it", "source", en.name)
			if err := n.addSource(en, t, opts); err != nil {
				n.log.Error("source failed", "source", en.name, "err", err)
			}
			return
		}
	})
}

// awaitOpens waits until every file and tail handed to the engine has
// opened, or failed, and fails with the first that failed. Sources that
// reconnect are not waited for: they retry in the background.
func (n *Node) awaitOpens(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		pending := 0
		n.mu.Lock()
		entries := append([]*entry(nil), n.entries...)
		n.mu.Unlock()
		for _, en := range entries {
			if en.cfg.File == nil && en.cfg.Tail == nil {
				continue
			}
			en.mu.Lock()
			st, id, hasID, err := en.state, en.id, en.hasID, en.err
			en.mu.Unlock()
			if st == stateOpening && hasID {
				if s, ok := n.e.SourceStats(id); ok && s.State == engine.Running {
					en.mu.Lock()
					if en.state == stateOpening && en.id == id {
						en.state, st = stateRunning, stateRunning
					}
					en.mu.Unlock()
				}
			}
			switch st {
			case stateFailed:
				return &startError{msg: fmt.Sprintf("sources[%d] (%s): cannot open: %s", en.index, en.name, describeErr(err)), err: err}
			case stateOpening:
				pending++
			}
		}
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sources did not open within %v", pending, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unwrapSource drops the engine's *srcs.SourceError wrapper, whose name
// and operation the node's message already gives.
func unwrapSource(err error) error {
	var se *srcs.SourceError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// entryOf returns the entry a chunk's source belongs to, or nil.
func (n *Node) entryOf(c engine.Chunk) *entry {
	n.idMu.RLock()
	en := n.byID[c.Source]
	n.idMu.RUnlock()
	return en
}

// sourceEnded notes a source's end-of-stream chunk: a source of the node
// file that failed is failed until a reload replaces it.
func (n *Node) sourceEnded(en *entry, c engine.Chunk) {
	n.idMu.Lock()
	delete(n.byID, c.Source)
	if en != nil && en.ln != nil && c.Final != nil && c.Final.RateHolds > 0 {
		en.rateHolds.Add(c.Final.RateHolds)
		en.rateHeld.Add(int64(c.Final.RateHeld))
	}
	n.idMu.Unlock()
	n.mu.Lock()
	draining := n.draining
	n.mu.Unlock()
	if en == nil {
		return
	}
	en.mu.Lock()
	if en.ln != nil { // a connection of a listener
		en.conns--
		en.mu.Unlock()
		if c.Final != nil && c.Final.State == engine.Failed {
			en.connsFailed.Add(1)
		}
		return
	}
	failed := c.Final != nil && c.Final.State == engine.Failed
	switch {
	case failed:
		en.state = stateFailed
		if en.err == nil && c.Final.LastErr != nil {
			en.err = c.Final.LastErr
		}
	case en.stopped || draining:
		en.state = stateStopped
	default:
		en.state = stateDone
	}
	err := en.err
	en.mu.Unlock()
	switch {
	case failed:
		n.log.Error("source failed", "source", en.name, "err", describeErr(err))
	case !draining:
		n.log.Info("source ended", "source", en.name)
	}
}

// countRecords counts the records of a data chunk, for the status line.
func countRecords(en *entry, c engine.Chunk) int {
	switch {
	case c.Flags&srcs.Datagrams != 0:
		k := 0
		srcs.ForEachDatagram(c.Data, func([]byte) bool { k++; return true })
		return k
	case en != nil && en.cfg.MQTT != nil:
		k := 0
		mqtt.ForEachMQTTMessage(c.Data, en.cfg.MQTT.Version, func(mqtt.MQTTMessage) error { k++; return nil })
		return k
	case c.Flags&srcs.Records != 0 && en != nil && en.framer != nil:
		k, _, _ := srcs.CountRecords(en.framer, c.Data)
		return k
	}
	return 0
}

// Preflight returns what would stop a node with cfg at start-up that the
// file alone does not show: a file or tail that cannot be read (unless the
// tail waits for its file), a checkpoint that cannot be written, a web
// configuration file the metrics endpoint cannot use. It opens
// no source and binds nothing. `sluice check` prints these as warnings.
func Preflight(cfg Config) []string {
	var out []string
	for i, s := range cfg.Sources {
		var err error
		switch {
		case s.File != nil:
			err = checkReadable(s.File.Path)
		case s.Tail != nil:
			_, err = checkTail(s.Tail)
		case s.TCP != nil && s.TCP.TLS != nil:
			err = checkTLSFiles(s.TCP.TLS)
		case s.TCPClient != nil && s.TCPClient.TLS != nil:
			err = checkTLSFiles(s.TCPClient.TLS)
		case s.MQTT != nil && s.MQTT.TLS != nil:
			err = checkTLSFiles(s.MQTT.TLS)
		}
		if err != nil {
			out = append(out, fmt.Sprintf("sources[%d] (%s): %v", i, s.Name(), err))
		}
	}
	if cfg.Metrics.Listen == "" {
		for _, k := range []struct {
			set bool
			key string
		}{{cfg.Metrics.Pprof, "metrics.pprof"}, {cfg.Metrics.WebConfigFile != "", "metrics.web_config_file"}} {
			if k.set {
				out = append(out, k.key+": needs an endpoint: run refuses to start unless metrics.listen or --metrics gives one")
			}
		}
	}
	if wc := cfg.Metrics.WebConfigFile; wc != "" {
		if _, err := checkWebConfig(wc); err != nil {
			out = append(out, fmt.Sprintf("metrics.web_config_file: %v", err))
		}
	}
	return append(out, jetStreamNotes(cfg)...)
}

// checkCheckpointDir says what stops a checkpoint file from being saved
// in its directory: the directory missing, not a directory, or not
// writable by this process (found by creating a file there and removing
// it).
func checkCheckpointDir(ck string) error {
	dir := filepath.Dir(ck)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("checkpoint %s: its directory %s does not exist", ck, dir)
	case err != nil:
		return fmt.Errorf("checkpoint %s: its directory %s: %w", ck, dir, pathReason(err))
	case !fi.IsDir():
		return fmt.Errorf("checkpoint %s: %s is not a directory", ck, dir)
	}
	tmp, err := os.CreateTemp(dir, ".sluice-check-*")
	if err != nil {
		return fmt.Errorf("checkpoint %s: its directory %s is not writable: %w", ck, dir, pathReason(err))
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// pathReason is the cause of a *fs.PathError (permission denied), without
// the operation and path the caller's message already gives.
func pathReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// listenError says why a listener could not open, in the operator's
// terms: the address and the reason once (address already in use),
// without the layers of Go's network errors.
func listenError(addr string, err error) error {
	var oe *net.OpError
	var dns *net.DNSError
	if errors.As(err, &oe) || errors.As(err, &dns) {
		return &startError{msg: fmt.Sprintf("cannot listen on %s: %s", addr, netReason(err)), err: err}
	}
	// A listener's own configuration: "srcs: listen tcp ADDR: tls: ...".
	msg := strings.TrimPrefix(err.Error(), "srcs: ")
	if strings.HasPrefix(msg, "listen ") {
		if _, rest, ok := strings.Cut(msg, ": "); ok {
			msg = rest
		}
	}
	return &startError{msg: msg, err: err}
}

// netReason is the cause of a network error, without its operation and
// addresses: the system call's error, or a name lookup's.
func netReason(err error) string {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, dns.Err)
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "srcs: ")
}

// startError is an error whose message the node words itself; it unwraps
// to the cause for errors.Is and errors.As.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

// checkTLSFiles says whether a tls section's certificate and key load, and
// its client CA bundle holds a certificate.
func checkTLSFiles(t *srcs.TLSConfig) error {
	if t.CertFile != "" || t.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return fmt.Errorf("tls.cert_file %s, tls.key_file %s: %w", t.CertFile, t.KeyFile, pathReason(err))
		}
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return fmt.Errorf("tls.ca_file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
	}
	return nil
}

// reSelfName matches the start srcs gives a source's errors: the
// operation and the source's name (open tcp://127.0.0.1:1).
var reSelfName = regexp.MustCompile(`^(open|mqtt) [a-z]+://\S+$`)

// describeErr says what went wrong with a source in the operator's terms,
// once: the cause without the layers of Go's errors (cannot connect to
// ADDR: connection refused), without the source's own name, which the
// caller gives, without Go package prefixes, and with the credentials of
// URLs redacted.
func describeErr(err error) string {
	if err == nil {
		return ""
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return fmt.Sprintf("cannot resolve %s: %s", dns.Name, dns.Err)
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		switch {
		case oe.Op == "dial" && oe.Addr != nil:
			return fmt.Sprintf("cannot connect to %s: %s", oe.Addr, netReason(err))
		case oe.Op == "read" || oe.Op == "write":
			return oe.Op + ": " + netReason(err)
		}
	}
	segs := strings.Split(operatorWords(redactSecrets(unwrapSource(err).Error())), ": ")
	// Leading segments that name the source itself (open tcp://host:port,
	// mqtt mqtt://host:port) repeat what the caller says.
	for len(segs) > 1 && reSelfName.MatchString(segs[0]) {
		segs = segs[1:]
	}
	return strings.Join(segs, ": ")
}
