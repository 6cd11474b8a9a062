package mqtt_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-io/sluice/internal/testkit/mosquitto"
	"github.com/sluice-io/sluice/internal/testkit/srcstest"
	mqttsrc "github.com/sluice-io/sluice/srcs/mqtt"
)

// startMosquitto runs Debian's mosquitto until the test ends, or skips
// (fails under SLUICE_REQUIRE_MOSQUITTO=1) when it is not installed.
func startMosquitto(t *testing.T) *mosquitto.Broker {
	t.Helper()
	b, err := mosquitto.Start(srcstest.RequireMosquitto(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Kill)
	return b
}

// TestMQTTMosquittoRestart subscribes at QoS 1 to a real mosquitto, read
// both ways, restarts the broker mid-stream while a publisher keeps
// publishing, and checks that every message published after the
// subscriber has subscribed again arrives. Duplicates are allowed (QoS 1
// is at least once) and counted.
func TestMQTTMosquittoRestart(t *testing.T) {
	for _, version := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			bothWays(t, func(t *testing.T, o driveOpts) {
				broker := startMosquitto(t)
				const topic = "sluice/seq"
				s := subscribe(t, mqttsrc.MQTTConfig{
					Broker: broker.Addr, ClientID: fmt.Sprintf("sluice-test-sub-v%d", version), Topics: []string{topic},
					QoS: 1, Version: version, DialTimeout: 2 * time.Second,
				}, o)
				s.pump(10*time.Second, "the first SUBACK", func() bool { return s.m.Stats().Subscribes >= 1 })

				pub := mosquitto.StartPublisher(broker.Addr, topic)
				t.Cleanup(pub.Halt)
				s.pump(10*time.Second, "messages before the restart", func() bool { return len(s.msgs) >= 200 })

				broker.Kill()
				if err := broker.Start(); err != nil {
					t.Fatal(err)
				}
				s.pump(10*time.Second, "the subscriber to subscribe again", func() bool { return s.m.Stats().Subscribes >= 2 })
				// Every number first sent from now on reaches the new
				// subscription.
				from := pub.Sending() + 1
				s.pump(10*time.Second, "messages after the restart", func() bool { return pub.Confirmed() >= from+500 })
				pub.Halt()
				last := pub.Confirmed() // numbers below it were acknowledged

				seen := map[int64]int{}
				missing := func() int64 {
					clear(seen)
					for _, m := range s.msgs {
						if m.topic != topic {
							t.Fatalf("message on topic %q", m.topic)
						}
						n, err := strconv.ParseInt(m.payload, 10, 64)
						if err != nil {
							t.Fatalf("payload %q", m.payload)
						}
						seen[n]++
					}
					var miss int64
					for n := from; n < last; n++ {
						if seen[n] == 0 {
							miss++
						}
					}
					return miss
				}
				s.pump(10*time.Second, "every message published after the resubscribe", func() bool { return missing() == 0 })
				dups := 0
				for _, c := range seen {
					dups += c - 1
				}
				st := s.m.Stats()
				t.Logf("v%d via %s: %d messages received, %d published after the resubscribe (from #%d to #%d), %d duplicates; stats %+v",
					version, o, len(s.msgs), last-from, from, last-1, dups, st)
				if st.Sessions < 2 {
					t.Fatalf("stats %+v: the subscriber never reconnected", st)
				}
			})
		})
	}
}
