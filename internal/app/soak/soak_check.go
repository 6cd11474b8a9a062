package soak

import (
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// castagnoli is the CRC-32C table every load's checksums use.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// soakMaxMismatches bounds the mismatch lines a report keeps; the count
// goes on.
const soakMaxMismatches = 200

// clientRec is what one soak connection wrote, as the client saw it.
// Its goroutine fills it; the checker reads it after clientDone.
type clientRec struct {
	name    string // network://local address: the engine's name for it
	k       uint64 // the connection's number, which seeds its stream
	end     connEnd
	written int64
	unacked int64 // endAbort: bytes not acknowledged when it reset
	crc     uint32
	problem string // what went wrong on the client side, if anything
}

// mayBeUnseen says whether the engine may never see the connection: an
// abort none of whose bytes the engine's kernel acknowledged (see
// connEnd), or a reset that wrote nothing.
func (r *clientRec) mayBeUnseen() bool {
	switch r.end {
	case endAbort:
		return r.written <= r.unacked
	case endReset:
		// Nothing written: with the listener's queues full, the handshake
		// may never have completed on the engine's side before the reset
		// undid it, and there are no bytes to lose.
		return r.written == 0
	}
	return false
}

// engStream is what the engine delivered for one accepted connection.
// The handler goroutine of its source fills it; the checker reads it
// after its end-of-stream chunk.
type engStream struct {
	id    srcs.ID
	name  string
	bytes int64
	crc   uint32
	err   error // the source error reported before its end, if any
}

// soakChecker is the engine's consumer in the soak. It routes each chunk
// by its source's name: the UDP socket, the tail and the MQTT subscriber
// have checkers of their own (known before their sources are added);
// every other source is an accepted connection, whose bytes are counted
// and checksummed until its end-of-stream chunk, and then paired, by
// name, with the client's record of the same connection. A pair is
// checked as soon as both halves are complete, and then forgotten, so
// the checker holds only the connections in flight.
//
// The handler and error handler run on the engine's processing
// goroutines; a source's chunks and errors arrive in order on one of
// them. The other methods are safe for concurrent use.
type soakChecker struct {
	seed uint64
	udp  *udpCheck
	tail *tailCheck
	mqtt *mqttCheck

	mu      sync.Mutex
	live    map[srcs.ID]*engStream // accepted connections not yet ended
	clients map[string]*clientRec  // opened, not yet paired
	closed  map[string]bool        // clients done, by name, among clients
	ended   map[string]*engStream  // engine streams ended, not yet paired
	mism    []string
	nMism   uint64

	verified atomic.Uint64
	unseen   atomic.Uint64 // aborted connections the engine never saw
	// trustVerified counts the trust load's well-behaved streams checked
	// (soak_trust.go), apart from the stream load's.
	trustVerified atomic.Uint64
	// lateRefused counts the forger's connections whose PROXY header came
	// after the listener's first look: they became sources, which the
	// header then ended with srcs.ErrProxyUntrusted before any byte.
	lateRefused atomic.Uint64
}

func newSoakChecker(seed uint64) *soakChecker {
	return &soakChecker{seed: seed, live: map[srcs.ID]*engStream{}, clients: map[string]*clientRec{},
		closed: map[string]bool{}, ended: map[string]*engStream{}}
}

// failf records a mismatch.
func (k *soakChecker) failf(format string, args ...any) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.failLocked(fmt.Sprintf(format, args...))
}

func (k *soakChecker) failLocked(m string) {
	k.nMism++
	if len(k.mism) < soakMaxMismatches {
		k.mism = append(k.mism, m)
	}
}

// mismatches returns the kept mismatch lines and the count of all.
func (k *soakChecker) mismatches() ([]string, uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.mism), k.nMism
}

// handle is the engine's push handler.
func (k *soakChecker) handle(c engine.Chunk) {
	defer c.Release()
	switch {
	case k.udp != nil && c.Name == k.udp.name:
		k.udp.chunk(k, c)
		return
	case k.tail != nil && c.Name == k.tail.path:
		k.tail.chunk(k, c)
		return
	case k.mqtt != nil && c.Name == k.mqtt.name:
		k.mqtt.chunk(k, c)
		return
	}
	s := k.stream(c.Source, c.Name)
	if len(c.Data) > 0 {
		s.bytes += int64(len(c.Data))
		s.crc = crc32.Update(s.crc, castagnoli, c.Data)
	}
	if c.Flags&srcs.EndOfStream != 0 {
		k.streamEnded(s)
	}
}

// onError is the engine's error handler.
func (k *soakChecker) onError(err error) {
	var se *srcs.SourceError
	if !errors.As(err, &se) {
		k.failf("engine: an error that names no source: %v", err)
		return
	}
	switch {
	case k.udp != nil && se.Name == k.udp.name:
		if errors.Is(err, srcs.ErrDatagramTooLarge) {
			k.udp.tooLarge.Add(1)
			return
		}
		k.failf("udp: %v", err)
		return
	case k.tail != nil && se.Name == k.tail.path:
		k.failf("tail: %v", err)
		return
	case k.mqtt != nil && se.Name == k.mqtt.name:
		k.mqtt.errors.Add(1) // the broker's restarts cut sessions
		return
	}
	k.stream(se.ID, se.Name).err = err
}

// stream returns the record of accepted connection id, creating it on its
// first chunk or error.
func (k *soakChecker) stream(id srcs.ID, name string) *engStream {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.live[id]
	if s == nil {
		s = &engStream{id: id, name: name}
		k.live[id] = s
	}
	return s
}

// clientOpened registers a connection the client has just made.
func (k *soakChecker) clientOpened(r *clientRec) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, dup := k.clients[r.name]; dup {
		k.failLocked(fmt.Sprintf("%s: two connections in flight with the same local address", r.name))
	}
	k.clients[r.name] = r
}

// clientDone says the client has ended connection r; it is checked if
// the engine has ended it too.
func (k *soakChecker) clientDone(r *clientRec) {
	k.mu.Lock()
	k.closed[r.name] = true
	s := k.ended[r.name]
	if s != nil {
		delete(k.ended, r.name)
		delete(k.clients, r.name)
		delete(k.closed, r.name)
	}
	k.mu.Unlock()
	if s != nil {
		k.compare(r, s)
	}
}

// streamEnded takes an engine stream at its end-of-stream chunk; it is
// checked if the client has ended the connection too.
func (k *soakChecker) streamEnded(s *engStream) {
	if s.bytes == 0 && errors.Is(s.err, srcs.ErrProxyUntrusted) && forgerName(s.name) {
		k.mu.Lock()
		delete(k.live, s.id)
		k.mu.Unlock()
		k.lateRefused.Add(1)
		return
	}
	k.mu.Lock()
	delete(k.live, s.id)
	r := k.clients[s.name]
	if r == nil || !k.closed[s.name] {
		if _, dup := k.ended[s.name]; dup {
			k.failLocked(fmt.Sprintf("%s: the engine ended two streams of this name", s.name))
		}
		k.ended[s.name] = s
		k.mu.Unlock()
		return
	}
	delete(k.clients, s.name)
	delete(k.closed, s.name)
	k.mu.Unlock()
	k.compare(r, s)
}

// forgerName reports whether a stream's name is a connection from the
// trust load's forger (soakForgerIP).
func forgerName(name string) bool {
	hostport, ok := strings.CutPrefix(name, "tcp://")
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(hostport)
	return err == nil && net.ParseIP(host).Equal(soakForgerIP)
}

// compare checks one connection by the rule of its end (see connEnd).
func (k *soakChecker) compare(r *clientRec, s *engStream) {
	what := fmt.Sprintf("%s (%s)", r.name, r.end)
	if r.problem != "" {
		k.failf("%s: %s", what, r.problem)
		return
	}
	switch r.end {
	case endAbort:
		if s.bytes > r.written || s.bytes < r.written-r.unacked {
			k.failf("%s: client wrote %d bytes, %d of them acknowledged before the reset; the engine delivered %d",
				what, r.written, r.written-r.unacked, s.bytes)
			return
		}
		if want := soakPrefixCRC(k.seed, r.k, s.bytes); s.crc != want {
			k.failf("%s: the engine delivered %d of %d bytes, crc32c %08x, but the first %d bytes written have crc32c %08x",
				what, s.bytes, r.written, s.crc, s.bytes, want)
			return
		}
	default:
		if s.bytes != r.written || s.crc != r.crc {
			k.failf("%s: client wrote %d bytes, crc32c %08x; the engine delivered %d bytes, crc32c %08x",
				what, r.written, r.crc, s.bytes, s.crc)
			return
		}
		if (r.end == endClose || r.end == endHalfClose) && s.err != nil {
			k.failf("%s: every byte arrived, but a clean end was reported as an error: %v", what, s.err)
			return
		}
	}
	if r.k >= soakTrustSeedBase {
		k.trustVerified.Add(1)
		return
	}
	k.verified.Add(1)
}

// connsSettled says whether every connection has been paired and
// checked, but for aborted ones the engine may never see.
func (k *soakChecker) connsSettled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.ended) > 0 || len(k.live) > 0 {
		return false
	}
	for name, r := range k.clients {
		if !k.closed[name] || !r.mayBeUnseen() {
			return false
		}
	}
	return true
}

// compact replaces the maps by empty ones when nothing is in flight: a
// map keeps the room of its largest size.
func (k *soakChecker) compact() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.live)+len(k.clients)+len(k.closed)+len(k.ended) == 0 {
		k.live, k.clients, k.closed, k.ended = map[srcs.ID]*engStream{}, map[string]*clientRec{}, map[string]bool{}, map[string]*engStream{}
	}
}

// finishConns turns what is still unpaired into mismatches, once the
// load has stopped and the wait for deliveries is over.
func (k *soakChecker) finishConns() {
	k.mu.Lock()
	defer k.mu.Unlock()
	byName := map[string]*engStream{}
	for _, s := range k.live {
		byName[s.name] = s
	}
	var lines []string
	for name, r := range k.clients {
		switch {
		case k.closed[name] && byName[name] == nil && r.mayBeUnseen():
			delete(k.clients, name)
			delete(k.closed, name)
			k.unseen.Add(1)
		case !k.closed[name]:
			lines = append(lines, fmt.Sprintf("%s (%s): the client never finished", name, r.end))
		case byName[name] != nil:
			lines = append(lines, fmt.Sprintf("%s (%s): client wrote %d bytes and ended; the engine never ended the stream (%d bytes delivered so far)",
				name, r.end, r.written, byName[name].bytes))
		default:
			lines = append(lines, fmt.Sprintf("%s (%s): client wrote %d bytes and ended; the engine never delivered this connection",
				name, r.end, r.written))
		}
	}
	for name, s := range k.ended {
		if k.clients[name] == nil {
			lines = append(lines, fmt.Sprintf("%s: the engine delivered %d bytes from a connection the clients never made", name, s.bytes))
		}
	}
	for _, s := range k.live {
		if k.clients[s.name] == nil {
			lines = append(lines, fmt.Sprintf("%s: the engine still has an open stream (%d bytes) that no client made", s.name, s.bytes))
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		k.failLocked(l)
	}
}
