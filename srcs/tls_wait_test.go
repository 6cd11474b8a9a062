package srcs_test

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// tlsPair returns a TLS session's server side as a source, and its client.
func tlsPair(t *testing.T) (*srcs.Conn, *tls.Conn) {
	t.Helper()
	s := newTLSSetup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   *tls.Conn
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- res{nil, err}
			return
		}
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{s.server.TLS}})
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		err = tc.Handshake()
		tc.SetDeadline(time.Time{})
		got <- res{tc, err}
	}()
	cl, err := s.dial(t, ln.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	src := srcs.NewTLSConn(r.c, "tls://test")
	t.Cleanup(func() { src.Close() })
	return src, cl
}

// TestTLSWaitForPlaintext checks what the goroutine runner relies on to
// hold no buffer while a TLS session is idle: the wait on SyscallConn
// returns once plaintext can be read, the next Read returns exactly the
// staged bytes, later Reads the rest in order, a read deadline interrupts
// the wait without breaking the session, and the session's end comes
// after its last bytes.
func TestTLSWaitForPlaintext(t *testing.T) {
	src, cl := tlsPair(t)
	rc, err := src.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	wait := func() error {
		return rc.Read(func(uintptr) bool { t.Error("the wait called its callback"); return true })
	}
	var got bytes.Buffer
	buf := make([]byte, 64<<10)

	// A deadline interrupts a wait with nothing to read, and the session
	// goes on.
	src.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if err := wait(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("wait with a past deadline: %v", err)
	}
	src.SetReadDeadline(time.Time{})

	small := []byte("one line\n")
	big := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: several records
	if _, err := cl.Write(small); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil { // staged bytes make a second wait return at once
		t.Fatal(err)
	}
	n, err := src.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], small) {
		t.Fatalf("first read %q, %v; want %q", buf[:n], err, small)
	}
	got.Write(buf[:n])

	if _, err := cl.Write(big); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	n, err = src.Read(buf)
	if n > 512 {
		t.Fatalf("a read after a wait returned %d bytes, more than were staged", n)
	}
	got.Write(buf[:n])
	for err == nil {
		// The rest of a record, and whole records, with no wait.
		n, err = src.Read(buf)
		got.Write(buf[:n])
	}
	if err != io.EOF {
		t.Fatalf("read: %v", err)
	}
	if err := wait(); err != io.EOF {
		t.Fatalf("a wait after the end: %v, want EOF", err)
	}
	if want := append(small, big...); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, want %d", got.Len(), len(want))
	}
}
