package jetstream

import (
	"errors"
	"fmt"
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
