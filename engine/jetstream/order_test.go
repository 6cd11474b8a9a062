package jetstream

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// orderRig drives an order as the Publisher does, keeping what the
// Publisher keeps per slot (which chunk it holds), and writes down every
// decision as text: "send 1.0", "pipe 1.1>1.0", "release 1.0 1.1",
// "report 1.0: cause".
type orderRig struct {
	t        testing.TB
	o        *order
	now      time.Time
	chunk    []chunkID // by slot; seq -1: free
	seqs     map[srcs.ID]int64
	failNext int // publishes to refuse, as a closed connection would
	idles    int // times settle or beginClose said idle
	out      []string

	// onSend and onRelease, if set, see each publish made and each chunk
	// released.
	onSend    func(snd send, c chunkID)
	onRelease func(c chunkID)
}

// chunkID names a chunk by its source and sequence number.
type chunkID struct {
	src srcs.ID
	seq int64
}

func (c chunkID) String() string { return fmt.Sprintf("%d.%d", c.src, c.seq) }

const (
	rigAckTimeout = time.Second
	rigRetryWait  = 100 * time.Millisecond
)

var errRigPublish = errors.New("connection closed")

func newOrderRig(t testing.TB, slots int, solo bool) *orderRig {
	r := &orderRig{t: t, o: newOrder(slots, rigAckTimeout, rigRetryWait, false), now: time.Unix(1000, 0),
		chunk: make([]chunkID, slots), seqs: map[srcs.ID]int64{}}
	r.o.solo = solo
	for i := range r.chunk {
		r.chunk[i].seq = -1
	}
	return r
}

// add hands the order the next chunk of src, as Handle does.
func (r *orderRig) add(src srcs.ID) {
	i := r.o.add(src)
	if i < 0 {
		r.out = append(r.out, "refused")
		return
	}
	if r.chunk[i].seq >= 0 {
		r.t.Fatalf("add: slot %d still holds %v", i, r.chunk[i])
	}
	r.chunk[i] = chunkID{src, r.seqs[src]}
	r.seqs[src]++
	r.step()
}

// slot returns the slot holding c, and its generation.
func (r *orderRig) slot(c chunkID) (int, uint32) {
	for i, h := range r.chunk {
		if h == c {
			return i, r.o.gen(int32(i))
		}
	}
	r.t.Fatalf("no slot holds %v", c)
	return 0, 0
}

// ack acknowledges slot i's publish of generation gen, as onAck does.
func (r *orderRig) ack(i int, gen uint32, duplicate bool) {
	var rel []string
	for _, j := range r.o.ack(i, gen, duplicate) {
		c := r.chunk[j]
		if c.seq < 0 {
			r.t.Fatalf("ack: slot %d released, holding nothing", j)
		}
		if r.onRelease != nil {
			r.onRelease(c)
		}
		rel = append(rel, c.String())
		r.chunk[j].seq = -1
	}
	if len(rel) > 0 {
		r.out = append(r.out, "release "+strings.Join(rel, " "))
	}
	r.step()
	if len(rel) > 0 && r.o.settle(len(rel)) {
		r.idles++
	}
}

// step makes the publishes the order decides, and notes its reports.
func (r *orderRig) step() {
	for snd, ok := r.o.next(r.now); ok; snd, ok = r.o.next(r.now) {
		c := r.chunk[snd.slot]
		if c.seq < 0 {
			r.t.Fatalf("publish of slot %d, which holds nothing", snd.slot)
		}
		if snd.expect < 0 {
			r.out = append(r.out, "send "+c.String())
		} else {
			r.out = append(r.out, "pipe "+c.String()+">"+r.chunk[snd.expect].String())
		}
		if r.onSend != nil {
			r.onSend(snd, c)
		}
		var err error
		if r.failNext > 0 {
			r.failNext--
			err = errRigPublish
		}
		r.o.published(snd, err, r.now)
	}
	for _, rep := range r.o.takeReports() {
		r.out = append(r.out, "report "+r.chunk[rep.slot].String()+": "+rep.cause.Error())
	}
	r.o.takeKick()
	if err := r.o.consistent(); err != nil {
		r.t.Fatalf("%v\n%s", err, r.o.describe(r.now, func(i int32) uint64 { return uint64(r.chunk[i].seq) }))
	}
}

// consistent checks o's bookkeeping once an event's decisions are carried
// out: every slot held is in exactly one queue, its source's; a queue's
// head has been sent and awaits its acknowledgement or its retry, the
// chunks after it up to last were pipelined, and the rest were never
// sent; and the publisher wakes up by every deadline.
func (o *order) consistent() error {
	held := 0
	for i := range o.slots {
		if o.slots[i].state != slotFree {
			held++
		}
	}
	if held+len(o.free) != len(o.slots) || held > o.held {
		return fmt.Errorf("%d slots held, %d free of %d, %d chunks held", held, len(o.free), len(o.slots), o.held)
	}
	for src, q := range o.sources {
		n, err := o.consistentQueue(src, q)
		if err != nil {
			return fmt.Errorf("source %d: %w", src, err)
		}
		held -= n
	}
	if held != 0 {
		return fmt.Errorf("%d slots held in no queue", held)
	}
	if t := o.earliest(); !o.closed && !o.aborted && !t.IsZero() && (o.wake.IsZero() || o.wake.After(t)) {
		return fmt.Errorf("a deadline at %v, the publisher wakes at %v", t, o.wake)
	}
	return nil
}

// consistentQueue checks q, src's queue, and returns its length.
func (o *order) consistentQueue(src srcs.ID, q *queue) (int, error) {
	n, sent := 0, true // sent: up to q.last
	for i := q.head; i >= 0; i = o.slots[i].next {
		e := &o.slots[i]
		want := []slotState{slotSent, slotWaiting, slotDone}
		switch {
		case i == q.head:
			want = []slotState{slotSent, slotRetry}
		case !sent:
			want = []slotState{slotQueued}
		}
		if n++; n > len(o.slots) || e.src != src || !slices.Contains(want, e.state) {
			return n, fmt.Errorf("slot %d, chunk %d of the queue: source %d, state %d", i, n, e.src, e.state)
		}
		if i == q.last {
			sent = false
		}
		if e.next < 0 && i != q.tail {
			return n, fmt.Errorf("ends at slot %d, its tail is %d", i, q.tail)
		}
	}
	if sent {
		return n, fmt.Errorf("last %d is not in the queue", q.last)
	}
	return n, nil
}

// do runs one line of a script (see TestOrder) and returns what the
// order decided.
func (r *orderRig) do(line string) string {
	r.out = r.out[:0]
	ev, arg, _ := strings.Cut(line, " ")
	n, _ := strconv.Atoi(arg)
	switch ev {
	case "add":
		r.add(srcs.ID(n))
	case "ack", "dup":
		i, gen := r.slot(parseChunkID(arg))
		r.ack(i, gen, ev == "dup")
	case "late": // an acknowledgement of a slot's earlier chunk
		r.ack(n, r.o.gen(int32(n))-1, false)
	case "nack", "reject":
		i, gen := r.slot(parseChunkID(arg))
		r.o.nack(i, gen, errors.New("no responders"), ev == "reject", r.now)
		r.step()
	case "fail":
		r.failNext = n
	case "wait", "reconnect":
		d, _ := time.ParseDuration(arg)
		r.now = r.now.Add(d)
		r.o.tick(ev == "reconnect")
		r.step()
	case "close":
		if r.o.beginClose() {
			r.idles++
		}
	default:
		r.t.Fatalf("unknown step %q", line)
	}
	return strings.Join(r.out, "; ")
}

// parseChunkID reads a chunkID as String writes it.
func parseChunkID(s string) chunkID {
	var c chunkID
	fmt.Sscanf(s, "%d.%d", &c.src, &c.seq)
	return c
}

// orderScripts are the cases of TestOrder, which says how to read them.
var orderScripts = []struct {
	name   string
	solo   bool
	slots  int
	script string
}{
	{"a source on a cluster goes one chunk per round trip", false, 4, `
		add 1     | send 1.0
		add 1     |
		add 2     | send 2.0
		add 1     |
		ack 1.0   | release 1.0; send 1.1
		ack 2.0   | release 2.0
		ack 1.1   | release 1.1; send 1.2
		ack 1.2   | release 1.2`},
	{"a source alone is pipelined and released in order", true, 4, `
		add 1     | send 1.0
		add 1     | pipe 1.1>1.0
		add 1     | pipe 1.2>1.1
		ack 1.1   |
		dup 1.2   |
		ack 1.0   | release 1.0 1.1 1.2`},
	{"another source between stops the pipeline", true, 4, `
		add 1     | send 1.0
		add 2     | send 2.0
		add 1     |
		ack 1.0   | release 1.0; send 1.1
		add 1     | pipe 1.2>1.1
		ack 2.0   | release 2.0
		ack 1.1   | release 1.1
		ack 1.2   | release 1.2`},
	{"a rejected chunk goes plainly once it heads its source, and pipelining pauses", true, 4, `
		add 1     | send 1.0
		add 1     | pipe 1.1>1.0
		reject 1.1 |
		ack 1.0   | release 1.0; send 1.1
		add 1     |
		ack 1.1   | release 1.1; send 1.2
		ack 1.2   | release 1.2
		wait 1s   |
		add 1     | send 1.3
		add 1     | pipe 1.4>1.3
		ack 1.3   | release 1.3
		ack 1.4   | release 1.4`},
	{"a head's error is reported once and retried each RetryWait", false, 4, `
		add 1     | send 1.0
		add 1     |
		nack 1.0  | report 1.0: no responders
		wait 50ms |
		wait 50ms | send 1.0
		nack 1.0  |
		wait 100ms | send 1.0
		ack 1.0   | release 1.0; send 1.1
		ack 1.1   | release 1.1`},
	{"an overdue acknowledgement sends the chunk again", false, 4, `
		add 1     | send 1.0
		add 2     | send 2.0
		wait 1s   | send 1.0; send 2.0; report 1.0: no acknowledgement within 1s; report 2.0: no acknowledgement within 1s
		wait 1s   | send 1.0; send 2.0
		dup 1.0   | release 1.0
		ack 2.0   | release 2.0`},
	{"a reconnect sends every head again and reports nothing", true, 4, `
		add 1     | send 1.0
		add 1     | pipe 1.1>1.0
		add 2     | send 2.0
		reconnect | send 1.0; send 2.0
		ack 1.1   |
		ack 1.0   | release 1.0 1.1
		ack 2.0   | release 2.0`},
	{"an overdue pipelined chunk waits to head its source", true, 4, `
		add 1     | send 1.0
		add 1     | pipe 1.1>1.0
		wait 1s   | send 1.0; report 1.0: no acknowledgement within 1s
		ack 1.0   | release 1.0; send 1.1
		ack 1.1   | release 1.1`},
	{"a publish the client refuses goes again after RetryWait, with nothing pipelined behind it before", true, 4, `
		fail 1    |
		add 1     | send 1.0; report 1.0: connection closed
		add 1     |
		wait 100ms | send 1.0
		add 1     | pipe 1.1>1.0; pipe 1.2>1.1
		ack 1.0   | release 1.0
		ack 1.1   | release 1.1
		ack 1.2   | release 1.2`},
	{"a pipelined publish the client refuses goes plainly later", true, 4, `
		add 1     | send 1.0
		fail 1    |
		add 1     | pipe 1.1>1.0
		ack 1.0   | release 1.0; send 1.1
		ack 1.1   | release 1.1`},
	{"late and repeated replies are ignored", false, 2, `
		add 1     | send 1.0
		ack 1.0   | release 1.0
		late 0    |
		add 1     | send 1.1
		late 0    |
		nack 1.1  | report 1.1: no responders
		ack 1.1   | release 1.1
		late 0    |`},
	{"close is idle once nothing is held", false, 2, `
		add 1     | send 1.0
		close     |
		ack 1.0   | release 1.0`},
}

// TestOrder runs scripts of events through an order and checks each
// event's decisions. A line is "event | decisions": add SRC (Handle a
// chunk of source SRC), ack, dup, nack or reject SRC.SEQ (a reply to that
// chunk's publish), late SLOT (an acknowledgement with the slot's previous
// generation), fail N (the next N publishes fail as the client hands them
// over), wait D (the clock moves on, the timer fires), reconnect, close.
func TestOrder(t *testing.T) {
	for _, tc := range orderScripts {
		t.Run(tc.name, func(t *testing.T) {
			r := newOrderRig(t, tc.slots, tc.solo)
			for line := range strings.SplitSeq(strings.TrimSpace(tc.script), "\n") {
				ev, want, _ := strings.Cut(line, "|")
				ev, want = strings.TrimSpace(ev), strings.TrimSpace(want)
				if got := r.do(ev); got != want {
					t.Fatalf("%s: got %q, want %q\n%s", ev, got, want, r.o.describe(r.now, func(int32) uint64 { return 0 }))
				}
			}
			if r.o.held != 0 || len(r.o.sources) != 0 || len(r.o.free) != tc.slots {
				t.Fatalf("at the end: %d held, %d sources, %d slots free", r.o.held, len(r.o.sources), len(r.o.free))
			}
			if wantIdle := r.o.closing; (r.idles == 1) != wantIdle || r.idles > 1 {
				t.Fatalf("idle %d times", r.idles)
			}
		})
	}
}

// TestOrderLifecycle: add refuses once Close gave up or ended, replies are
// ignored once it gave up, and idle comes once.
func TestOrderLifecycle(t *testing.T) {
	r := newOrderRig(t, 2, false)
	r.do("add 1")
	if r.o.beginClose() {
		t.Fatal("idle while a chunk is held")
	}
	if n := r.o.abort(); n != 1 {
		t.Fatalf("abort: %d held, want 1", n)
	}
	if got := r.do("ack 1.0"); got != "" {
		t.Fatalf("ack after abort: %q", got)
	}
	if got := r.do("add 1"); got != "refused" {
		t.Fatalf("add after abort: %q", got)
	}
	r.o.shut()
	if got := r.do("wait 1h"); got != "" || !r.o.wake.IsZero() {
		t.Fatalf("tick after shut: %q, wake %v", got, r.o.wake)
	}
}

// fakeStream is a JetStream stream as the order's promises depend on it:
// it drops a message whose id it holds (a duplicate window longer than
// any test), refuses a pipelined one whose Nats-Expected-Last-Msg-Id is
// not its last message, and stores the rest.
type fakeStream struct {
	stored map[chunkID]bool
	last   chunkID           // the last message stored; src 0: none, or another publisher's
	seq    map[srcs.ID]int64 // per source, the last sequence stored
}

// A publish in flight, and its reply on the way back.
type (
	flight struct {
		slot   int
		gen    uint32
		c      chunkID
		expect *chunkID // pipelined behind it
	}
	reply struct {
		slot     int
		gen      uint32
		dup      bool
		err      error
		rejected bool
	}
)

var errWrongLast = errors.New("wrong last msg ID")

// store takes the publish f and returns JetStream's reply. A chunk stored
// out of its source's order fails the test.
func (s *fakeStream) store(t *testing.T, f flight) reply {
	r := reply{slot: f.slot, gen: f.gen}
	switch {
	case s.stored[f.c]:
		r.dup = true
	case f.expect != nil && *f.expect != s.last:
		r.err, r.rejected = errWrongLast, true
	default:
		prev, ok := s.seq[f.c.src]
		if !ok {
			prev = -1
		}
		if prev != f.c.seq-1 {
			t.Fatalf("%v stored when the last of its source is %d: out of order", f.c, prev)
		}
		s.stored[f.c], s.last, s.seq[f.c.src] = true, f.c, f.c.seq
	}
	return r
}

// FuzzOrder runs an order against a fake stream through a network that
// loses, repeats and reorders publishes and replies, with refused
// publishes, server errors, reconnects, another publisher on the stream
// and a clock that jumps, then lets everything through. Throughout, each
// source's chunks are stored in order and once, released in order, once,
// and only once stored, and pipelined only behind the previous chunk of
// their source; a chunk's failure is reported once. At the end every
// chunk is stored and released, and Close's idle comes once.
func FuzzOrder(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 3, 0, 3, 0})
	f.Add([]byte{0, 0x10, 0, 0x20, 1, 1, 1, 2, 3, 3, 3, 7, 6, 9, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 2, 9, 1, 1, 1, 4, 3, 3, 6, 0x16, 10, 0, 0, 11, 3})
	f.Add([]byte{8, 0, 0, 5, 1, 0x26, 7, 0x35, 3, 1, 3, 0x46, 0, 12, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		w := newOrderWorld(t)
		for _, b := range ops {
			w.apply(b%13, int(b>>4))
			w.checkReports()
		}
		w.drain()
		w.checkEnd()
	})
}

// orderWorld is an orderRig with a stream and the network between them,
// keeping what the invariants need.
type orderWorld struct {
	t           *testing.T
	r           *orderRig
	st          *fakeStream
	flights     []flight
	replies     []reply
	released    map[chunkID]bool
	reported    map[chunkID]bool
	nextRelease map[srcs.ID]int64
}

const worldSlots, worldSources = 4, 3

func newOrderWorld(t *testing.T) *orderWorld {
	w := &orderWorld{t: t, r: newOrderRig(t, worldSlots, true),
		st:       &fakeStream{stored: map[chunkID]bool{}, seq: map[srcs.ID]int64{}},
		released: map[chunkID]bool{}, reported: map[chunkID]bool{}, nextRelease: map[srcs.ID]int64{}}
	w.r.onSend, w.r.onRelease = w.sent, w.release
	return w
}

// sent puts a publish on the wire, unless the client refuses it.
func (w *orderWorld) sent(snd send, c chunkID) {
	fl := flight{slot: int(snd.slot), gen: w.r.o.gen(snd.slot), c: c}
	if snd.expect >= 0 {
		prev := w.r.chunk[snd.expect]
		if prev.src != c.src || prev.seq != c.seq-1 {
			w.t.Fatalf("%v pipelined behind %v", c, prev)
		}
		fl.expect = &prev
	}
	if w.r.failNext == 0 {
		w.flights = append(w.flights, fl)
	}
}

func (w *orderWorld) release(c chunkID) {
	if w.released[c] || !w.st.stored[c] || c.seq != w.nextRelease[c.src] {
		w.t.Fatalf("%v released: released before %v, stored %v, next of its source %d",
			c, w.released[c], w.st.stored[c], w.nextRelease[c.src])
	}
	w.released[c] = true
	w.nextRelease[c.src]++
}

func (w *orderWorld) deliver(rp reply) {
	if rp.err == nil {
		w.r.ack(rp.slot, rp.gen, rp.dup)
		return
	}
	w.r.o.nack(rp.slot, rp.gen, rp.err, rp.rejected, w.r.now)
	w.r.step()
}

// take removes and returns the publish (or reply) arg picks.
func take[T any](s *[]T, arg int) T {
	i := arg % len(*s)
	v := (*s)[i]
	*s = append((*s)[:i], (*s)[i+1:]...)
	return v
}

// apply runs event op with its argument arg.
func (w *orderWorld) apply(op byte, arg int) {
	r := w.r
	switch {
	case op == 0 && r.o.held < worldSlots:
		r.add(srcs.ID(1 + arg%worldSources))
	case op == 1 && len(w.flights) > 0: // the stream takes a publish
		w.replies = append(w.replies, w.st.store(w.t, take(&w.flights, arg)))
	case op == 2 && len(w.flights) > 0: // a publish is lost
		take(&w.flights, arg)
	case op == 3 && len(w.replies) > 0: // a reply arrives
		w.deliver(take(&w.replies, arg))
	case op == 4 && len(w.replies) > 0: // a reply is lost
		take(&w.replies, arg)
	case op == 5 && len(w.flights) > 0: // no responders
		fl := take(&w.flights, arg)
		w.replies = append(w.replies, reply{slot: fl.slot, gen: fl.gen, err: errNoResponders})
	case op == 6: // time passes; the timer fires
		r.now = r.now.Add([]time.Duration{time.Millisecond, rigRetryWait, rigAckTimeout, pipelinePause}[arg%4])
		r.o.tick(false)
		r.step()
	case op == 7: // a reconnect
		r.o.tick(true)
		r.step()
	case op == 8:
		r.failNext = 1 + arg%2
	case op == 9: // another publisher
		w.st.last = chunkID{}
	case op == 10:
		r.o.solo = !r.o.solo
	case op == 11 && len(w.replies) > 0: // a reply arrives twice
		w.deliver(w.replies[arg%len(w.replies)])
	case op == 12 && !r.o.closing:
		r.do("close")
	}
}

// checkReports checks that no chunk's failure is reported twice.
func (w *orderWorld) checkReports() {
	for _, o := range w.r.out {
		if name, ok := strings.CutPrefix(o, "report "); ok {
			id, _, _ := strings.Cut(name, ":")
			c := parseChunkID(id)
			if w.reported[c] {
				w.t.Fatalf("%v reported twice", c)
			}
			w.reported[c] = true
		}
	}
	w.r.out = w.r.out[:0]
}

// drain closes, then lets everything through: the stream takes every
// publish, every reply arrives, and the timer fires at the order's
// deadlines, until nothing is held.
func (w *orderWorld) drain() {
	r := w.r
	r.failNext = 0
	if !r.o.closing {
		r.do("close")
	}
	for n := 0; r.o.held > 0; n++ {
		switch {
		case n > 10000:
			w.t.Fatalf("chunks held for good: %s", w.describe())
		case len(w.flights) > 0:
			w.replies = append(w.replies, w.st.store(w.t, take(&w.flights, 0)))
		case len(w.replies) > 0:
			w.deliver(take(&w.replies, 0))
		case r.o.wake.IsZero():
			w.t.Fatalf("chunks held with no publish in flight and no deadline: %s", w.describe())
		default:
			if r.o.wake.After(r.now) {
				r.now = r.o.wake
			}
			r.o.tick(false)
			r.step()
		}
		w.checkReports()
	}
}

func (w *orderWorld) describe() string {
	return w.r.o.describe(w.r.now, func(i int32) uint64 { return uint64(w.r.chunk[i].seq) })
}

// checkEnd checks that every chunk was stored and released, and that
// nothing is left of them.
func (w *orderWorld) checkEnd() {
	for src, n := range w.r.seqs {
		if w.nextRelease[src] != n || w.st.seq[src] != n-1 {
			w.t.Fatalf("source %d: %d chunks added, %d released, last stored %d", src, n, w.nextRelease[src], w.st.seq[src])
		}
	}
	if o := w.r.o; len(o.sources) != 0 || len(o.free) != worldSlots || w.r.idles != 1 {
		w.t.Fatalf("at the end: %d sources, %d slots free, idle %d times", len(o.sources), len(o.free), w.r.idles)
	}
}
