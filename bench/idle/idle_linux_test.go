package idle

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseSockstat(t *testing.T) {
	in := []byte(`sockets: used 200421
TCP: inuse 200406 orphan 1 tw 3684 alloc 200410 mem 154
UDP: inuse 0 mem 0
UDPLITE: inuse 0
RAW: inuse 0
FRAG: inuse 0 memory 0
`)
	var k KernelMem
	parseSockstat(in, &k)
	want := KernelMem{SocketsUsed: 200421, TCPInuse: 200406, TCPOrphan: 1, TCPTimeWait: 3684, TCPAlloc: 200410, TCPMemPages: 154}
	if k.SocketsUsed != want.SocketsUsed || k.TCPInuse != want.TCPInuse || k.TCPOrphan != want.TCPOrphan ||
		k.TCPTimeWait != want.TCPTimeWait || k.TCPAlloc != want.TCPAlloc || k.TCPMemPages != want.TCPMemPages {
		t.Errorf("got %+v, want %+v", k, want)
	}
}

func TestParseSlabinfo(t *testing.T) {
	in := []byte(`slabinfo - version: 2.1
# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>
TCP               200013 200070   2368   13    8 : tunables    0    0    0 : slabdata  15390  15390      0
io_kiocb          100000 100032    256   16    1 : tunables    0    0    0 : slabdata   6252   6252      0
dentry               10     21    192   21    1 : tunables    0    0    0 : slabdata      1      1      0
dentry                5     21    192   21    1 : tunables    0    0    0 : slabdata      1      1      0
`)
	got := parseSlabinfo(in)
	if len(got) != 3 {
		t.Fatalf("got %d caches: %v", len(got), got)
	}
	if c := got["TCP"]; c.Objects != 200013 || c.ObjSize != 2368 {
		t.Errorf("TCP: %+v", c)
	}
	if c := got["dentry"]; c.Objects != 15 || c.ObjSize != 192 {
		t.Errorf("dentry, twice: %+v", c)
	}
}

// TestCountFDs checks countFDs against 80 descriptors opened and closed.
// Other tests' goroutines may open or close descriptors meanwhile (the
// runtime's netpoller, a child's pipes), so a try whose count did not come
// back to where it started is repeated.
func TestCountFDs(t *testing.T) {
	var errs []string
	for range 5 {
		n0 := countFDs()
		if n0 < 3 {
			t.Fatalf("count: %d", n0)
		}
		var fds []int
		for range 40 {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			fds = append(fds, p[0], p[1])
		}
		n1 := countFDs()
		for _, fd := range fds {
			unix.Close(fd)
		}
		n2 := countFDs()
		if n1 == n0+len(fds) && n2 == n0 {
			return
		}
		errs = append(errs, fmt.Sprintf("%d, then %d with %d more, then %d after closing them", n0, n1, len(fds), n2))
	}
	t.Errorf("countFDs never matched the descriptors opened and closed: %s", strings.Join(errs, "; "))
}
