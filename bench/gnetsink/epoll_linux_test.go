package main

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// TestEpollSink sends streams of known bytes from real loopback clients
// into the bare epoll sink, some in writes larger than its one buffer,
// one written a byte at a time, and one a quiet source, and checks every
// stream's bytes, CRC-32C and newline records, and the quiet source's
// lines.
func TestEpollSink(t *testing.T) {
	s := &sink{newline: true, crc: true, ended: make(chan struct{})}
	srv, err := serveEpoll(s, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.stop()
		}
	}()
	sizes := []int{0, 1, 300, 64 << 10, 1<<20 + 7, 3 << 20}
	want := map[string][]byte{} // by the client's address
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(sizes)+2)
	for i, n := range sizes {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		p := make([]byte, n)
		for j := range p {
			p[j] = byte('a' + r.IntN(27))
			if p[j] == 'a'+26 {
				p[j] = '\n'
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", srv.addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			mu.Lock()
			want[c.LocalAddr().String()] = p
			mu.Unlock()
			if n == 300 { // a byte at a time
				for k := range p {
					if _, err := c.Write(p[k : k+1]); err != nil {
						errs <- err
						return
					}
				}
				return
			}
			if _, err := c.Write(p); err != nil {
				errs <- err
			}
		}()
	}
	// The quiet source: its header and first stamp in one write, then a
	// stamp split over two writes, then one that is not a number.
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := net.Dial("tcp", srv.addr())
		if err != nil {
			errs <- err
			return
		}
		defer c.Close()
		now := time.Now().UnixNano()
		for _, w := range []string{fmt.Sprintf("%s\n%d\n", quietHeader, now), fmt.Sprint(now)[:5], fmt.Sprint(now)[5:] + "\n", "x\n"} {
			if _, err := c.Write([]byte(w)); err != nil {
				errs <- err
				return
			}
			time.Sleep(time.Millisecond) // separate reads, not synchronisation
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every client has closed; the sink has seen it when every connection
	// is counted closed.
	deadline := time.Now().Add(10 * time.Second)
	for s.closed.Load() < int64(len(sizes)+1) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections closed", s.closed.Load(), len(sizes)+1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopped = true
	if err := srv.stop(); err != nil {
		t.Fatal(err)
	}
	castag := crc32.MakeTable(crc32.Castagnoli)
	var total uint64
	seen := 0
	for _, st := range s.streams {
		if st.quiet != nil {
			continue
		}
		p, ok := want[st.peer]
		if !ok {
			t.Errorf("a stream from %s, which no client was", st.peer)
			continue
		}
		seen++
		total += uint64(len(p))
		recs, tail := 0, len(p)
		for k, b := range p {
			if b == '\n' {
				recs, tail = recs+1, len(p)-1-k
			}
		}
		if st.bytes != uint64(len(p)) || st.crc != crc32.Checksum(p, castag) || st.records != uint64(recs) || st.tail != uint64(tail) || st.errors != 0 {
			t.Errorf("%s: %d bytes crc %08x, %d records, tail %d, %d errors; sent %d bytes crc %08x, %d records, tail %d",
				st.peer, st.bytes, st.crc, st.records, st.tail, st.errors, len(p), crc32.Checksum(p, castag), recs, tail)
		}
	}
	if seen != len(sizes) || s.total.Load() != total {
		t.Errorf("%d streams, %d bytes; sent %d streams, %d bytes", seen, s.total.Load(), len(sizes), total)
	}
	q := s.quiet
	if q.Connections != 1 || q.Lines != 2 || q.BadLines != 1 || len(q.LatencyNs) != 2 {
		t.Fatalf("quiet: %+v; want 1 connection, 2 lines, 1 bad", q)
	}
	for _, ns := range q.LatencyNs {
		if ns <= 0 || ns > int64(10*time.Second) {
			t.Errorf("quiet latency %v", time.Duration(ns))
		}
	}
}
