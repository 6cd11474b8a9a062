package srcs_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-io/sluice/srcs"
)

// tlsSource is what the test asks of a TLS session's source.
type tlsSource interface {
	srcs.Source
	srcs.Deadliner
	syscall.Conn
}

// tlsPair returns a TLS session's server side as a source, accepted by a
// listener with TLS, and its client.
func tlsPair(t *testing.T) (tlsSource, *tls.Conn) {
	t.Helper()
	s := newTLSSetup(t)
	ln, err := srcs.ListenTCP("127.0.0.1:0", srcs.ListenerConfig{
		TLS: &srcs.TLSConfig{CertFile: s.server.CertFile, KeyFile: s.server.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		src srcs.Source
		err error
	}
	got := make(chan res, 1)
	go func() {
		src, err := ln.AcceptSource(context.Background())
		got <- res{src, err}
	}()
	cl, err := s.dial(t, ln.Addr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.src.Close() })
	return r.src.(tlsSource), cl
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
