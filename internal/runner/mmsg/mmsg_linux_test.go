package mmsg

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestMmsghdrLayout(t *testing.T) {
	// struct mmsghdr: a msghdr, then unsigned int msg_len, padded to the
	// msghdr's alignment.
	want := unsafe.Sizeof(unix.Msghdr{}) + unsafe.Alignof(unix.Msghdr{})
	if got := unsafe.Sizeof(mmsghdr{}); got != want {
		t.Fatalf("sizeof(mmsghdr) = %d, want %d", got, want)
	}
}

// udpPair returns a bound UDP receiver and a sender connected to it.
func udpPair(t *testing.T) (rx, tx int) {
	t.Helper()
	rx, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rx) })
	if err := unix.Bind(rx, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(rx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(tx) })
	if err := unix.Connect(tx, sa); err != nil {
		t.Fatal(err)
	}
	return rx, tx
}

// TestRecv: one call takes every queued datagram up to the batch, each in
// its own room, in order; a datagram longer than its room shows as
// truncated with its real length; an empty socket says EAGAIN.
func TestRecv(t *testing.T) {
	rx, tx := udpPair(t)
	const stride, room = 24, 16
	space := make([]byte, 8*stride)
	r := NewReceiver(8)

	if _, _, err := r.Recv(rx, space, stride, room, 8); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("empty socket: err %v, want EAGAIN", err)
	}
	sent := [][]byte{[]byte("one"), {}, []byte("a datagram longer than its room"), bytes.Repeat([]byte("x"), room), []byte("five")}
	for _, d := range sent {
		if _, err := unix.Write(tx, d); err != nil {
			t.Fatal(err)
		}
	}
	// Three rooms fit in this space: the batch is capped by it, and says
	// so. The last room takes the rest of the space, here just a room.
	n, asked, err := r.Recv(rx, space[:2*stride+room], stride, room, 8)
	if err != nil || n != 3 || asked != 3 {
		t.Fatalf("Recv into three rooms: %d of %d, %v; want 3 of 3", n, asked, err)
	}
	for i, d := range sent[:3] {
		trunc := len(d) > room
		if r.Size(i) != len(d) || r.Truncated(i) != trunc {
			t.Errorf("datagram %d: size %d truncated %v, want %d %v", i, r.Size(i), r.Truncated(i), len(d), trunc)
		}
		if got := space[i*stride : i*stride+min(len(d), room)]; !bytes.Equal(got, d[:len(got)]) {
			t.Errorf("datagram %d: %q, want %q", i, got, d)
		}
	}
	n, _, err = r.Recv(rx, space, stride, room, 8)
	if err != nil || n != 2 {
		t.Fatalf("second Recv: %d, %v; want the 2 left", n, err)
	}
	for i, d := range sent[3:] {
		if r.Size(i) != len(d) || r.Truncated(i) || !bytes.Equal(space[i*stride:i*stride+len(d)], d) {
			t.Errorf("datagram %d of the second batch: %q (%d), want %q", i, space[i*stride:i*stride+r.Size(i)], r.Size(i), d)
		}
	}
	// A datagram longer than a room fits the last room, which runs to the
	// end of the space.
	long := bytes.Repeat([]byte("y"), 2*room)
	unix.Write(tx, []byte("short"))
	unix.Write(tx, long)
	if n, _, err := r.Recv(rx, space[:stride+len(long)], stride, room, 2); err != nil || n != 2 || r.Truncated(1) ||
		r.Size(1) != len(long) || !bytes.Equal(space[stride:stride+len(long)], long) {
		t.Fatalf("a long datagram into the last room: %d, %v, truncated %v", n, err, r.Truncated(1))
	}
}

func BenchmarkRecv(b *testing.B) {
	rx, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(rx)
	unix.Bind(rx, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	sa, _ := unix.Getsockname(rx)
	tx, _ := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	defer unix.Close(tx)
	unix.Connect(tx, sa)
	const stride, room, k = 516, 512, 32
	space := make([]byte, k*stride)
	msg := make([]byte, 512)
	r := NewReceiver(k)
	b.ReportAllocs()
	got := 0
	for b.Loop() {
		for range k {
			unix.Write(tx, msg)
		}
		n, _, _ := r.Recv(rx, space, stride, room, k)
		got += n
	}
	b.ReportMetric(float64(got)/float64(b.N), "datagrams/op")
}
