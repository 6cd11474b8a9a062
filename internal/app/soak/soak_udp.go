package soak

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/srcs"
)

// The soak's datagrams: a 20-byte header (the sender's number, the
// datagram's sequence number, its whole length, and the CRC-32C of the
// body), then a body of up to udpMaxBody seeded bytes. A datagram is
// whole when its length and CRC match, and was sent when its sender
// exists and had handed that sequence number to the kernel.
const (
	udpSenders     = 4
	udpHeader      = 20
	udpMaxBody     = 1200
	udpMaxDatagram = 2048 // the source's MaxDatagram: many per buffer
	udpTick        = 5 * time.Millisecond
	// udpWindow is how far back, per sender, the checker remembers which
	// sequence numbers arrived, to catch a duplicate; loopback reorders
	// rarely and by little.
	udpWindow = 1 << 16
)

// udpSender is one socket sending the soak's datagrams.
type udpSender struct {
	id    uint32
	c     *net.UDPConn
	begun atomic.Uint64 // sequence numbers handed out: sent or tried
	sent  atomic.Uint64 // accepted by the kernel
	errs  atomic.Uint64 // refused by the kernel (not sent)
}

// udpLoad runs the senders, each at UDPRate/udpSenders datagrams per
// second.
type udpLoad struct {
	senders []*udpSender
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func startUDPLoad(c Config, addr string, chk *udpCheck, failf func(string, ...any)) *udpLoad {
	l := &udpLoad{done: make(chan struct{})}
	raddr, _ := net.ResolveUDPAddr("udp", addr)
	for i := range udpSenders {
		s := &udpSender{id: uint32(i)}
		uc, err := net.DialUDP("udp", nil, raddr)
		if err != nil {
			failf("udp: sender %d: %v", i, err)
			continue
		}
		s.c = uc
		l.senders = append(l.senders, s)
		chk.senders[i].Store(s)
		l.wg.Go(func() { s.run(c.Seed, c.UDPRate/udpSenders, l.done) })
	}
	return l
}

func (l *udpLoad) stop() {
	l.once.Do(func() { close(l.done) })
	l.wg.Wait()
}

// udpBody fills b with datagram seq's body and returns its length.
func udpBody(seed uint64, id uint32, seq uint64, b []byte) int {
	var pcg rand.PCG
	pcg.Seed(seed^uint64(id)<<32, seq)
	n := int(pcg.Uint64() % (udpMaxBody + 1))
	for i := 0; i < n; i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], pcg.Uint64())
		copy(b[i:n], w[:])
	}
	return n
}

func (s *udpSender) run(seed uint64, rate float64, done <-chan struct{}) {
	defer s.c.Close()
	var buf [udpHeader + udpMaxBody]byte
	t := time.NewTicker(udpTick)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			due := uint64(rate * now.Sub(start).Seconds())
			for s.begun.Load() < due {
				seq := s.begun.Add(1) - 1
				n := udpBody(seed, s.id, seq, buf[udpHeader:])
				binary.LittleEndian.PutUint32(buf[0:], s.id)
				binary.LittleEndian.PutUint64(buf[4:], seq)
				binary.LittleEndian.PutUint32(buf[12:], uint32(udpHeader+n))
				binary.LittleEndian.PutUint32(buf[16:], crc32.Checksum(buf[udpHeader:udpHeader+n], castagnoli))
				if _, err := s.c.Write(buf[:udpHeader+n]); err != nil {
					s.errs.Add(1)
					continue
				}
				s.sent.Add(1)
			}
		}
	}
}

// udpCheck checks the datagrams the engine delivers. Its chunk method
// runs on the UDP source's processing goroutine only; the counters are
// safe to read at any time.
type udpCheck struct {
	name    string
	senders []atomic.Pointer[udpSender] // by id
	seen    []udpSeen

	received  atomic.Uint64
	bytes     atomic.Uint64
	reordered atomic.Uint64
	tooLarge  atomic.Uint64
}

// udpSeen remembers, for one sender, the highest sequence number seen
// and which of the udpWindow before it arrived.
type udpSeen struct {
	next uint64 // one past the highest seen
	bits [udpWindow / 64]uint64
}

func newUDPCheck(name string, senders int) *udpCheck {
	return &udpCheck{name: name, senders: make([]atomic.Pointer[udpSender], senders), seen: make([]udpSeen, senders)}
}

func (u *udpCheck) chunk(k *soakChecker, c engine.Chunk) {
	if len(c.Data) == 0 {
		return
	}
	if c.Flags&srcs.Datagrams == 0 {
		k.failf("udp: a chunk of %d bytes without the Datagrams flag", len(c.Data))
		return
	}
	err := srcs.ForEachDatagram(c.Data, func(p []byte) bool {
		u.datagram(k, p)
		return true
	})
	if err != nil {
		k.failf("udp: %v", err)
	}
}

func (u *udpCheck) datagram(k *soakChecker, p []byte) {
	if len(p) < udpHeader {
		k.failf("udp: a datagram of %d bytes, shorter than the header", len(p))
		return
	}
	id := binary.LittleEndian.Uint32(p[0:])
	seq := binary.LittleEndian.Uint64(p[4:])
	size := binary.LittleEndian.Uint32(p[12:])
	crc := binary.LittleEndian.Uint32(p[16:])
	switch {
	case int(size) != len(p):
		k.failf("udp: sender %d datagram %d: %d bytes delivered of %d sent", id, seq, len(p), size)
		return
	case crc32.Checksum(p[udpHeader:], castagnoli) != crc:
		k.failf("udp: sender %d datagram %d: crc32c mismatch", id, seq)
		return
	case int(id) >= len(u.senders) || u.senders[id].Load() == nil:
		k.failf("udp: datagram %d from sender %d, which does not exist", seq, id)
		return
	case seq >= u.senders[id].Load().begun.Load():
		k.failf("udp: sender %d datagram %d delivered before it was sent", id, seq)
		return
	}
	s := &u.seen[id]
	switch {
	case seq >= s.next:
		for n := s.next; n < seq && n < s.next+udpWindow; n++ {
			s.bits[(n%udpWindow)/64] &^= 1 << (n % 64)
		}
		s.next = seq + 1
	case seq+udpWindow < s.next:
		u.reordered.Add(1) // too old to tell a duplicate; loopback does not duplicate
	default:
		u.reordered.Add(1)
		if s.bits[(seq%udpWindow)/64]&(1<<(seq%64)) != 0 {
			k.failf("udp: sender %d datagram %d delivered twice", id, seq)
			return
		}
	}
	s.bits[(seq%udpWindow)/64] |= 1 << (seq % 64)
	u.received.Add(1)
	u.bytes.Add(uint64(len(p)))
}
