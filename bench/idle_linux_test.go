package bench

import (
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

func TestCountFDs(t *testing.T) {
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
	if n1 != n0+len(fds) {
		t.Errorf("with %d more descriptors: %d, then %d", len(fds), n0, n1)
	}
	if n2 := countFDs(); n2 != n0 {
		t.Errorf("after closing them: %d, want %d", n2, n0)
	}
}
