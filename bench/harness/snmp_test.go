package harness

import (
	"strings"
	"testing"
)

func TestParseSNMPUDP(t *testing.T) {
	const ip = "Ip: Forwarding DefaultTTL\nIp: 1 64\n"
	for _, tc := range []struct {
		name    string
		in      string
		want    UDPMIB
		wantErr string
	}{
		{"linux 6", ip + "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n" +
			"Udp: 415743 3 63469 479235 63460 0 0 0 9\n" +
			"UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n" +
			"UdpLite: 1 1 1 1 1 0 0 0 0\n",
			UDPMIB{InDatagrams: 415743, NoPorts: 3, InErrors: 63469, RcvbufErrors: 63460}, ""},
		{"older kernel, fewer columns", "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\nUdp: 10 0 2 7 2 0\n",
			UDPMIB{InDatagrams: 10, InErrors: 2, RcvbufErrors: 2}, ""},
		{"columns in another order", "Udp: RcvbufErrors InErrors NoPorts InDatagrams\nUdp: 4 5 6 7\n",
			UDPMIB{InDatagrams: 7, NoPorts: 6, InErrors: 5, RcvbufErrors: 4}, ""},
		{"UdpLite only", "UdpLite: InDatagrams NoPorts InErrors RcvbufErrors\nUdpLite: 1 2 3 4\n", UDPMIB{}, "no Udp lines"},
		{"no values", "Udp: InDatagrams NoPorts InErrors RcvbufErrors\n", UDPMIB{}, "without values"},
		{"short values", "Udp: InDatagrams NoPorts InErrors RcvbufErrors\nUdp: 1 2 3\n", UDPMIB{}, "4 Udp names and 3 values"},
		{"no RcvbufErrors", "Udp: InDatagrams NoPorts InErrors OutDatagrams\nUdp: 1 2 3 4\n", UDPMIB{}, "lacks"},
		{"not a number", "Udp: InDatagrams NoPorts InErrors RcvbufErrors\nUdp: 1 x 3 4\n", UDPMIB{}, "NoPorts"},
		{"empty", "", UDPMIB{}, "no Udp lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSNMPUDP([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestUDPMIBSub(t *testing.T) {
	a := UDPMIB{InDatagrams: 10, NoPorts: 1, InErrors: 5, RcvbufErrors: 4}
	b := UDPMIB{InDatagrams: 25, NoPorts: 1, InErrors: 9, RcvbufErrors: 8}
	if got, want := b.Sub(a), (UDPMIB{InDatagrams: 15, InErrors: 4, RcvbufErrors: 4}); got != want {
		t.Errorf("sub: %+v, want %+v", got, want)
	}
	// A counter that went backwards (a namespace made anew) is no growth.
	if got := a.Sub(b); got != (UDPMIB{}) {
		t.Errorf("backwards: %+v, want zero", got)
	}
}
