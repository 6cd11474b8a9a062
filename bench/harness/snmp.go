package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
)

// UDPMIB is the Udp line of /proc/net/snmp: a network namespace's UDP
// counters since it was made. Every datagram UDP takes in is counted once
// in InDatagrams (handed to a socket's reader), NoPorts (no socket on its
// port) or InErrors, and RcvbufErrors is the part of InErrors dropped for
// a full receive buffer.
type UDPMIB struct {
	InDatagrams  uint64 `json:"in_datagrams"`
	NoPorts      uint64 `json:"no_ports"`
	InErrors     uint64 `json:"in_errors"`
	RcvbufErrors uint64 `json:"rcvbuf_errors"`
}

// Sub is the counters' growth from a to m.
func (m UDPMIB) Sub(a UDPMIB) UDPMIB {
	d := func(x, y uint64) uint64 { return y - min(x, y) }
	return UDPMIB{InDatagrams: d(a.InDatagrams, m.InDatagrams), NoPorts: d(a.NoPorts, m.NoPorts),
		InErrors: d(a.InErrors, m.InErrors), RcvbufErrors: d(a.RcvbufErrors, m.RcvbufErrors)}
}

// parseSNMPUDP reads the Udp counters from /proc/net/snmp: a line of names
// and a line of values, each starting "Udp:". Counters it does not know
// are skipped; the four it keeps must be there.
func parseSNMPUDP(b []byte) (UDPMIB, error) {
	var names [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || !bytes.Equal(f[0], []byte("Udp:")) {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		vals := f[1:]
		if len(vals) != len(names) {
			return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: %d Udp names and %d values", len(names), len(vals))
		}
		var m UDPMIB
		seen := 0
		for i, n := range names {
			var p *uint64
			switch string(n) {
			case "InDatagrams":
				p = &m.InDatagrams
			case "NoPorts":
				p = &m.NoPorts
			case "InErrors":
				p = &m.InErrors
			case "RcvbufErrors":
				p = &m.RcvbufErrors
			default:
				continue
			}
			v, err := strconv.ParseUint(string(vals[i]), 10, 64)
			if err != nil {
				return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: Udp %s: %w", n, err)
			}
			*p = v
			seen++
		}
		if seen != 4 {
			return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: Udp lacks one of InDatagrams, NoPorts, InErrors, RcvbufErrors")
		}
		return m, nil
	}
	if names != nil {
		return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: Udp names without values")
	}
	return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: no Udp lines")
}

// ReadUDPMIB reads the UDP counters of the sink's network namespace: on
// the veth wire from inside it (`ip netns exec`, since /proc/net is the
// reader's namespace), else this process's.
func ReadUDPMIB(ctx context.Context, w WireEnv) (UDPMIB, error) {
	var b []byte
	var err error
	if w.Veth() {
		b, err = w.Command(ctx, SideSink, "cat", "/proc/net/snmp").Output()
	} else {
		b, err = os.ReadFile("/proc/net/snmp")
	}
	if err != nil {
		return UDPMIB{}, fmt.Errorf("bench: /proc/net/snmp: %w", err)
	}
	return parseSNMPUDP(b)
}
