package soak

import (
	"strings"
	"testing"
)

// TestMQTTCheckTail checks how the MQTT checker judges a publisher's last
// messages once it has halted: all must arrive, unless those missing lie
// in one broker restart's window, as when the load stops during a restart
// and the publisher's last messages reach the new broker before the
// subscriber does.
func TestMQTTCheckTail(t *testing.T) {
	for _, tc := range []struct {
		name      string
		delivered int64    // messages 0 to delivered-1 arrive
		window    [2]int64 // a restart's window; {0, 0}: none
		confirmed int64    // acknowledged to the publisher
		wantLost  uint64   // counted lost in restarts
		want      string   // the mismatch, "" for none
	}{
		{"AllArrived", 20, [2]int64{}, 20, 0, ""},
		{"AllArrivedBesideAWindow", 20, [2]int64{5, 8}, 20, 0, ""},
		{"TailInTheLastWindow", 12, [2]int64{12, 20}, 20, 8, ""},
		{"TailPastTheWindow", 12, [2]int64{12, 19}, 20, 0, "publisher 0: 20 messages acknowledged by the broker, the engine delivered up to 12"},
		{"TailBeforeTheWindow", 10, [2]int64{12, 20}, 20, 0, "delivered up to 10"},
		{"TailWithoutARestart", 12, [2]int64{}, 20, 0, "delivered up to 12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := newSoakChecker(1)
			m := newMQTTCheck("mqtt", 1)
			if tc.window != ([2]int64{}) {
				m.allow(0, tc.window[0], tc.window[1])
			}
			for seq := range tc.delivered {
				m.message(k, 0, seq)
			}
			got := m.tail(0, tc.confirmed)
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("tail: %q, want no mismatch", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("tail: %q, want one saying %q", got, tc.want)
			}
			if un := m.unexcused(); len(un) != 0 {
				t.Errorf("unexcused gaps after the tail: %q", un)
			}
			if n := m.lost(); n != tc.wantLost {
				t.Errorf("lost in restarts: %d, want %d", n, tc.wantLost)
			}
			if k.nMism != 0 {
				t.Errorf("the checker failed while messages arrived in order: %q", k.mism)
			}
		})
	}
}
