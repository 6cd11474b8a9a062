package wirecheck

import (
	"maps"
	"testing"
)

func TestParseSoftirqs(t *testing.T) {
	const in = `                    CPU0       CPU1
          HI:          0          0
       TIMER:       3043       3115
      NET_TX:          4          0
      NET_RX:       2274       2782
`
	tests := []struct {
		name, row string
		want      map[int]uint64
		wantErr   bool
	}{
		{"NET_RX", "NET_RX", map[int]uint64{0: 2274, 1: 2782}, false},
		{"TIMER", "TIMER", map[int]uint64{0: 3043, 1: 3115}, false},
		{"missing", "RCU", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSoftirqs([]byte(in), tt.row)
			if (err != nil) != tt.wantErr || !maps.Equal(got, tt.want) {
				t.Errorf("got %v, %v; want %v (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseSoftnetStat(t *testing.T) {
	tests := []struct {
		name           string
		in             string
		processed, ipi map[int]uint64
		wantErr        bool
	}{
		{"with CPU numbers (5.10 on)",
			"0036579f 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 001161f6 00000000 00000000 00000000 00000000 00000000\n" +
				"0028927e 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 000bd75f 00000000 00000000 00000003 00000000 00000000\n",
			map[int]uint64{0: 0x36579f, 3: 0x28927e}, map[int]uint64{0: 0x1161f6, 3: 0xbd75f}, false},
		{"in CPU order (older kernels)",
			"00000010 0 0 0 0 0 0 0 0 00000002 0\n00000020 0 0 0 0 0 0 0 0 00000003 0\n",
			map[int]uint64{0: 16, 1: 32}, map[int]uint64{0: 2, 1: 3}, false},
		{"too few columns", "00000010 0 0\n", nil, nil, true},
		{"not hexadecimal", "zz 0 0 0 0 0 0 0 0 0 0\n", nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, r, err := parseSoftnetStat([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && (!maps.Equal(p, tt.processed) || !maps.Equal(r, tt.ipi)) {
				t.Errorf("got %v %v, want %v %v", p, r, tt.processed, tt.ipi)
			}
		})
	}
}
