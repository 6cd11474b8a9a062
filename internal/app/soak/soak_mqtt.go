package soak

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// mqttSoakTopic is the soak's topic prefix: publisher i publishes on
// mqttSoakTopic/p<i>.
const mqttSoakTopic = "sluice-soak"

// mqttBrokerConf is the broker's configuration beyond mosquitto.Start's:
// queue a subscriber's QoS 1 messages without limit. By default mosquitto
// drops those past 1,000 queued, and a subscriber the engine does not read for
// a few seconds (its pool taken by thousands of connections at the top of
// a wave) is that far behind at this rate: those would be the broker's
// losses, which no delivery guarantee covers.
var mqttBrokerConf = []string{"max_queued_messages 0"}

// mqttLoad runs the publishers and kills the broker every MQTTRestart.
//
// Publishers and the subscriber use QoS 1, and the subscriber keeps its
// session (clean_session false), so delivery is at least once, in order
// per publisher. The broker runs without persistence and is killed
// (SIGKILL), as a crash would: the messages it had acknowledged to a
// publisher but not yet sent to the subscriber die with it, and those
// published to the new broker before the subscriber has subscribed again
// go to nobody. So each restart opens a window per publisher, and only
// there may messages be missing:
//
//   - before the kill, wait until the engine has delivered every message
//     the publisher had seen acknowledged (Confirmed); the window starts
//     there;
//   - after the restart, wait until the subscriber has subscribed again
//     (its Subscribes count grows); the window ends after the number the
//     publisher is sending then, since every later one is first published
//     after the subscription exists.
//
// Outside the windows every number must arrive; every first arrival must
// come after the ones below it; duplicates (a publisher sends a number
// again when the broker died before its PUBACK) are counted.
type mqttLoad struct {
	broker  *mosquitto.Broker
	src     *mqtt.MQTT
	pubs    []*mosquitto.Publisher
	chk     *mqttCheck
	failf   func(string, ...any)
	every   time.Duration
	settle  time.Duration
	seed    uint64
	restart time.Duration

	restarts atomic.Uint64
	// dropNotices counts the broker's "messages are being dropped" log
	// lines, read at each kill: with mqttBrokerConf there are none.
	dropNotices atomic.Uint64

	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

func startMQTTLoad(c Config, broker *mosquitto.Broker, src *mqtt.MQTT, chk *mqttCheck, failf func(string, ...any)) *mqttLoad {
	l := &mqttLoad{broker: broker, src: src, chk: chk, failf: failf, settle: c.Settle, seed: c.Seed,
		restart: c.MQTTRestart, done: make(chan struct{})}
	every := time.Duration(float64(time.Second) / c.MQTTRate)
	for i := range c.MQTTPubs {
		l.pubs = append(l.pubs, mosquitto.StartPacedPublisher(broker.Addr, fmt.Sprintf("sluice-soak-pub-%d", i),
			fmt.Sprintf("%s/p%d", mqttSoakTopic, i), every))
	}
	if l.restart > 0 {
		l.wg.Go(l.chaos)
	}
	return l
}

// stop ends a restart in progress (the broker is up when it returns) and
// halts the publishers.
func (l *mqttLoad) stop() {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
	for _, p := range l.pubs {
		p.Halt()
	}
}

func (l *mqttLoad) chaos() {
	rng := rand.New(rand.NewPCG(l.seed, 0x3977))
	for {
		t := time.NewTimer(l.restart)
		select {
		case <-l.done:
			t.Stop()
			return
		case <-t.C:
		}
		l.restartBroker(rng)
	}
}

// restartBroker kills the broker and starts it again, opening a window
// per publisher (see mqttLoad).
func (l *mqttLoad) restartBroker(rng *rand.Rand) {
	conf := make([]int64, len(l.pubs))
	for i, p := range l.pubs {
		conf[i] = p.Confirmed()
	}
	if !waitFor(l.settle, func() bool {
		for i := range l.pubs {
			if l.chk.pubs[i].next.Load() < conf[i] {
				return false
			}
		}
		return true
	}) {
		for i := range l.pubs {
			if got := l.chk.pubs[i].next.Load(); got < conf[i] {
				l.failf("mqtt: publisher %d: %d messages acknowledged by the broker, the engine delivered up to %d in %v",
					i, conf[i], got, l.settle)
			}
		}
	}
	subs := l.src.Stats().Subscribes
	l.broker.Kill()
	l.restarts.Add(1)
	l.dropNotices.Add(uint64(strings.Count(l.broker.Log(), "dropped")))
	time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond) // the broker is down
	if err := l.broker.Start(); err != nil {
		l.failf("mqtt: restarting the broker: %v", err)
		return
	}
	if !waitFor(l.settle, func() bool { return l.src.Stats().Subscribes > subs }) {
		l.failf("mqtt: the subscriber did not subscribe again within %v of the broker's restart", l.settle)
	}
	for i, p := range l.pubs {
		l.chk.allow(i, conf[i], p.Sending()+1)
	}
}

// complete says whether every acknowledged message has arrived, once the
// publishers have halted, but for a last run of them that a restart's
// window excuses (see mqttCheck.tail).
func (l *mqttLoad) complete() bool {
	for i, p := range l.pubs {
		if next := l.chk.pubs[i].next.Load(); next < p.Confirmed() && !l.chk.excused(i, next, p.Confirmed()) {
			return false
		}
	}
	return true
}

// finish checks, after the drain, that every message arrived except in
// the restart windows.
func (l *mqttLoad) finish() {
	for i, p := range l.pubs {
		if m := l.chk.tail(i, p.Confirmed()); m != "" {
			l.failf("%s", m)
		}
	}
	for _, m := range l.chk.unexcused() {
		l.failf("%s", m)
	}
}

func (l *mqttLoad) report() SoakMQTT {
	r := SoakMQTT{Enabled: true, Received: l.chk.received.Load(), Duplicates: l.chk.dups.Load(),
		Restarts: l.restarts.Load(), LostInRestarts: l.chk.lost(), Sessions: l.src.Stats().Sessions, Errors: l.chk.errors.Load(),
		BrokerDropNotices: l.dropNotices.Load()}
	for _, p := range l.pubs {
		r.Published += uint64(p.Confirmed())
	}
	return r
}

// mqttPub is the checker's state for one publisher.
type mqttPub struct {
	next    atomic.Int64 // one past the highest number delivered
	gaps    [][2]int64   // numbers skipped, [from, to); under mqttCheck.mu
	windows [][2]int64   // where numbers may be missing; under mqttCheck.mu
}

// mqttCheck checks the MQTT source's messages. Its chunk method runs on
// the source's processing goroutine only; the rest is safe for
// concurrent use.
type mqttCheck struct {
	name string
	pubs []mqttPub

	mu sync.Mutex

	received atomic.Uint64
	dups     atomic.Uint64
	errors   atomic.Uint64
}

func newMQTTCheck(name string, pubs int) *mqttCheck {
	return &mqttCheck{name: name, pubs: make([]mqttPub, pubs)}
}

// allow excuses publisher i's numbers in [from, to).
func (m *mqttCheck) allow(i int, from, to int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pubs[i].windows = append(m.pubs[i].windows, [2]int64{from, to})
}

func (m *mqttCheck) chunk(k *soakChecker, c engine.Chunk) {
	if len(c.Data) == 0 {
		return
	}
	prefix := []byte(mqttSoakTopic + "/p")
	err := mqtt.ForEachMQTTMessage(c.Data, 4, func(msg mqtt.MQTTMessage) error {
		id, ok := bytes.CutPrefix(msg.Topic, prefix)
		i, err := strconv.Atoi(string(id))
		if !ok || err != nil || i < 0 || i >= len(m.pubs) {
			return fmt.Errorf("a message on topic %q", msg.Topic)
		}
		seq, err := strconv.ParseInt(string(msg.Payload), 10, 64)
		if err != nil {
			return fmt.Errorf("publisher %d: a message %q", i, msg.Payload)
		}
		m.message(k, i, seq)
		return nil
	})
	if err != nil {
		k.failf("mqtt: %v", err)
	}
}

func (m *mqttCheck) message(k *soakChecker, i int, seq int64) {
	p := &m.pubs[i]
	next := p.next.Load()
	switch {
	case seq == next:
		p.next.Store(next + 1)
	case seq > next:
		m.mu.Lock()
		p.gaps = append(p.gaps, [2]int64{next, seq})
		m.mu.Unlock()
		p.next.Store(seq + 1)
	default:
		m.mu.Lock()
		late := false
		for _, g := range p.gaps {
			late = late || (seq >= g[0] && seq < g[1])
		}
		m.mu.Unlock()
		if late {
			k.failf("mqtt: publisher %d: message %d arrived after message %d", i, seq, next-1)
		} else {
			m.dups.Add(1)
		}
	}
	m.received.Add(1)
}

// excused reports whether publisher i's numbers [from, to) all lie in one
// restart window.
func (m *mqttCheck) excused(i int, from, to int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.excusedLocked(i, from, to)
}

func (m *mqttCheck) excusedLocked(i int, from, to int64) bool {
	for _, w := range m.pubs[i].windows {
		if from >= w[0] && to <= w[1] {
			return true
		}
	}
	return false
}

// tail checks publisher i's last messages once it has halted, confirmed
// being how many the broker acknowledged to it: every one must have
// arrived, unless the missing ones all lie in a restart's window. That
// happens when the load stops during a restart: the publisher, back on the
// new broker before the subscriber, publishes its backlog to nobody, and
// halts before it publishes a number past the window. Such a tail is lost
// in the restart, and counted as a gap. tail returns the mismatch, or "".
func (m *mqttCheck) tail(i int, confirmed int64) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := m.pubs[i].next.Load()
	switch {
	case next >= confirmed:
		return ""
	case m.excusedLocked(i, next, confirmed):
		m.pubs[i].gaps = append(m.pubs[i].gaps, [2]int64{next, confirmed})
		return ""
	}
	return fmt.Sprintf("mqtt: publisher %d: %d messages acknowledged by the broker, the engine delivered up to %d", i, confirmed, next)
}

// unexcused lists the gaps outside every window.
func (m *mqttCheck) unexcused() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for i := range m.pubs {
		for _, g := range m.pubs[i].gaps {
			if !m.excusedLocked(i, g[0], g[1]) {
				out = append(out, fmt.Sprintf("mqtt: publisher %d: messages %d to %d never arrived, and no broker restart excuses them",
					i, g[0], g[1]-1))
			}
		}
	}
	return out
}

// lost counts the messages missing inside restart windows.
func (m *mqttCheck) lost() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n uint64
	for i := range m.pubs {
		for _, g := range m.pubs[i].gaps {
			n += uint64(g[1] - g[0])
		}
	}
	return n
}
