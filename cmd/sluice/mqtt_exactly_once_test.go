package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
)

// TestMQTTExactlyOnce runs four publishers of numbered QoS 1 messages
// into mosquitto, with its persistence, and the sluice node subscribed
// at QoS 1 with a session the broker keeps, publishing into JetStream.
// It kills the node with SIGKILL twice where JetStream has stored
// messages the node has not heard about (a proxy between node and server
// holds the acknowledgements back, so no PUBACK has gone to the broker,
// which sends them again to the restarted node), once where the node
// has read messages JetStream never stored (the proxy drops its
// publishes, and another between node and broker makes sure the broker
// has read all the node sent it), kills the broker with
// SIGKILL and restarts it on its store (it sends again the messages the
// node acknowledged after its last save), and kills the node once at a
// random moment. An independent client then reads the stream and counts
// per publisher: every number stored once and in order, as one message
// with the payload as its body and the topic in its subject, and nothing
// else (no SUBACK, no PINGRESP) stored. It runs on the default runner
// and on epoll; and end to end at QoS 2 (publishers, the broker and the
// node's subscription), where the node answers a message with PUBREC
// only once JetStream has stored it: a PUBREC sent earlier would let the
// broker forget a message the killed node never stored.
func TestMQTTExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker, a NATS server and the node for about 15 s per case")
	}
	bin := srcstest.RequireMosquitto(t)
	for _, tc := range []struct {
		name   string
		runner string // "" for the default
		qos    byte   // the publishers' and the node's subscription's
	}{
		{"default", "", 1},
		{"epoll", "epoll", 1},
		{"qos2", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) { testMQTTExactlyOnce(t, bin, tc.runner, tc.qos) })
	}
}

func testMQTTExactlyOnce(t *testing.T, mosq, runner string, qos byte) {
	node := sluiceBin(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server did not start")
	}
	proxy := startAckProxy(t, ns.Addr().(*net.TCPAddr).String())
	dir := t.TempDir()
	// Saved after every message queued: then what the broker has
	// acknowledged to a publisher is on disk when it is killed between
	// publishes, and what the node acknowledged since the last save is
	// sent again after the restart.
	broker, err := mosquitto.StartWith(mosq, dir, "persistence true", "persistence_location "+dir+"/",
		"autosave_interval 1", "autosave_on_changes true", "user root", "max_queued_messages 0")
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Kill()
	mproxy := startMQTTProxy(t, broker.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	config := srcstest.WriteFile(t, dir, "node.yaml", fmt.Sprintf(`engine:
  buffers: 64
  buf_size: 4096
sources:
  - mqtt:
      broker: %s
      client_id: sluice-exactly-once
      topics: ["sensors/#"]
      qos: %d
      keep_alive: 5s
      backoff: {initial: 20ms, max: 200ms}
    flush: 5ms
output:
  jetstream:
    url: %s
    subject: mq.raw
    mqtt_subject: mq.{topic}
    stream: MQTTEO
    ack_timeout: 30s
drain_timeout: 20s
`, mproxy.Addr(), qos, proxy.URL()))

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := njs.New(nc)
	stored := func() uint64 {
		s, err := js.Stream(ctx, "MQTTEO")
		if errors.Is(err, njs.ErrStreamNotFound) {
			return 0
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}

	var cmd *exec.Cmd
	var stderr *srcstest.LockedBuffer
	var exited chan error
	start := func() {
		t.Helper()
		cmd = exec.CommandContext(ctx, node, "run", "-c", config)
		if runner != "" {
			cmd.Env = append(cmd.Environ(), "SLUICE_RUNNER="+runner)
		}
		stderr = &srcstest.LockedBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited = make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case <-tick.C:
			case err := <-exited:
				t.Fatalf("node exited (%v) before %s:\n%s", err, what, stderr)
			case <-ctx.Done():
				t.Fatalf("no %s in time (%d stored):\n%s", what, stored(), stderr)
			}
		}
	}
	kill := func() {
		t.Helper()
		cmd.Process.Kill()
		var ee *exec.ExitError
		if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("node after SIGKILL: %v\n%s", err, stderr)
		}
	}
	// progress waits until the node has stored n more messages.
	progress := func(n uint64) {
		t.Helper()
		base := stored()
		await(fmt.Sprintf("%d more messages stored", n), func() bool { return stored() >= base+n })
	}

	start()
	// The node's session subscribes once it connects; the broker keeps
	// for it only what comes after. A probe's message in the stream says
	// it has.
	probe := mosquitto.StartPacedPublisher(broker.Addr, "probe", "sensors/probe", 10*time.Millisecond)
	await("the node's subscription", func() bool { return stored() > 0 })
	probe.Halt()
	probes := stored()
	for stable := time.Now(); time.Since(stable) < 200*time.Millisecond; {
		time.Sleep(10 * time.Millisecond) // another process's progress: nothing to wait on
		if n := stored(); n != probes {
			probes, stable = n, time.Now()
		}
	}
	pubs := make([]*mosquitto.Publisher, 4)
	for i := range pubs {
		pubs[i] = mosquitto.StartQoSPublisher(broker.Addr, fmt.Sprintf("pub-%d", i), fmt.Sprintf("sensors/%d", i), 2*time.Millisecond, qos)
	}
	defer func() {
		for _, p := range pubs {
			p.Halt()
		}
	}()

	aimed := func() {
		t.Helper()
		progress(200)
		proxy.hold()
		held := stored()
		await("messages stored while their acknowledgements are held", func() bool { return stored() >= held+30 })
		kill()
		proxy.release(true)
		t.Logf("node killed with %d messages stored and not acknowledged", stored()-held)
		start()
	}
	aimed()
	aimed()

	// Killed where the node has read messages and JetStream has stored
	// none of them (the proxy drops its publishes): the broker must not
	// have had a PUBACK or PUBREC for them, or it never sends them again.
	// The broker reads the node's acknowledgements late; it has read
	// every one the node sent before the kill.
	progress(200)
	proxy.swallowPublishes()
	await("publishes of messages never stored", func() bool { return proxy.swallowedPublishes() >= 10 })
	if !mproxy.sync(20 * time.Second) {
		t.Fatalf("the broker read nothing more of the node's connection in 20s:\n%s", stderr)
	}
	kill()
	t.Logf("node killed with at least %d messages read and never stored", proxy.swallowedPublishes())
	proxy.release(true)
	start()

	// The broker, killed between publishes and restarted on its store.
	progress(200)
	resumes := make([]func(), len(pubs))
	for i, p := range pubs {
		resumes[i] = p.Pause()
	}
	// mosquitto confirms a message to its publisher before it saves it:
	// killed before the save, it would lose the message whatever its
	// subscribers do. Once the node has stored every confirmed message,
	// the broker has them all, and the node's acknowledgements since its
	// last save are what it sends again.
	confirmed := probes
	for _, p := range pubs {
		confirmed += uint64(p.Confirmed())
	}
	await("every confirmed message stored", func() bool { return stored() >= confirmed })
	broker.Kill()
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	for _, r := range resumes {
		r()
	}
	t.Log("broker killed and restarted")

	progress(200)
	time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond) // a random moment, on purpose
	kill()
	t.Log("node killed at a random moment")
	start()

	progress(200)
	sent := make([]int64, len(pubs))
	for i, p := range pubs {
		p.Halt()
		sent[i] = p.Confirmed()
	}
	want := probes
	for _, n := range sent {
		want += uint64(n)
	}
	for deadline := time.Now().Add(20 * time.Second); stored() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // another process's progress: nothing to wait on
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := <-exited; err != nil || !strings.Contains(stderr.String(), "msg=drained") {
		t.Fatalf("node after SIGTERM: %v\n%s", err, stderr)
	}

	// The independent count: per publisher, in stream order.
	s, err := js.Stream(ctx, "MQTTEO")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := make([]int64, len(pubs))
	seen := make([]map[int64]int, len(pubs))
	for i := range seen {
		seen[i] = map[int64]int{}
	}
	var lost, twice, reordered int64
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		if m.Subject == "mq.sensors.probe" {
			continue
		}
		var pub int
		if _, err := fmt.Sscanf(m.Subject, "mq.sensors.%d", &pub); err != nil || pub < 0 || pub >= len(pubs) ||
			m.Header.Get("Mqtt-Topic") != "sensors/"+strconv.Itoa(pub) || m.Header.Get("Mqtt-Qos") != strconv.Itoa(int(qos)) {
			t.Fatalf("message %d on %s, headers %v: no publisher's", seq, m.Subject, m.Header)
		}
		n, err := strconv.ParseInt(string(m.Data), 10, 64)
		if err != nil {
			t.Fatalf("message %d: body %q", seq, m.Data)
		}
		if seen[pub][n]++; seen[pub][n] > 1 {
			twice++
			continue
		}
		if n < next[pub] {
			reordered++
		}
		next[pub] = max(next[pub], n+1)
	}
	for i, n := range sent {
		for k := range n {
			if seen[i][k] == 0 {
				lost++
			}
		}
	}
	t.Logf("%d messages from %d publishers and the probe (%v confirmed): %d lost, %d repeated, %d out of order",
		info.State.Msgs, len(pubs), sent, lost, twice, reordered)
	if lost+twice+reordered > 0 {
		var missing []string
		for i, n := range sent {
			for k := range n {
				if seen[i][k] == 0 && len(missing) < 20 {
					missing = append(missing, fmt.Sprintf("%d/%d", i, k))
				}
			}
		}
		t.Fatalf("%d lost, %d repeated, %d out of order; lost: %v\n%s", lost, twice, reordered, missing, stderr)
	}
}
