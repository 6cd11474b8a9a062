package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"
)

// StreamCheckConfig configures `jetstream --check`: read a stream that a
// node filled with newline-delimited records, and check it against what
// the senders sent. scripts/jetstream-cluster.sh uses it.
type StreamCheckConfig struct {
	Stream string // the stream to read
	URL    string // NATS servers
	// Sent names a file of "SENDER COUNT" lines: each sender's records
	// are "SENDER SEQ ...\n" with SEQ counting from 0 on one connection.
	Sent string
	// Lossy is a message id prefix (a node's id_prefix) whose sources may
	// end early: that node was killed, and what it had read but not had
	// stored is lost.
	Lossy string
}

// StreamCheck is what `jetstream --check` found.
type StreamCheck struct {
	Messages, Sources                  int
	ChunksOutOfOrder, ChunksTwice      int
	Senders, Records, Stored           int
	RecordsOutOfOrder, RecordsTwice    int
	Lost, LostLossy, CutSenders, Mixed int
	PerPrefix                          map[string]int // sources per node
}

// streamKey is a source as the stream tells it: the publisher's id
// prefix and the engine's source id, never its address.
type streamKey struct {
	prefix string
	src    uint64
}

// CheckStream reads the whole stream in stream order and checks, per
// source, that its chunks carry sequence numbers 0, 1, 2, ..., and, per
// sender, that its records are stored once and in order, all of them
// unless its node was the killed one (Lossy), and then a prefix.
func CheckStream(ctx context.Context, c StreamCheckConfig, out io.Writer) (*StreamCheck, error) {
	sent := map[string]int{}
	if c.Sent != "" {
		b, err := os.ReadFile(c.Sent)
		if err != nil {
			return nil, fmt.Errorf("bench: check: %w", err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var name string
			var n int
			if _, err := fmt.Sscan(l, &name, &n); err != nil {
				return nil, fmt.Errorf("bench: check: %s: %q: %w", c.Sent, l, err)
			}
			sent[name] = n
		}
	}
	nc, err := nats.Connect(c.URL)
	if err != nil {
		return nil, fmt.Errorf("bench: check: %w", err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("bench: check: %w", err)
	}
	s, err := js.Stream(ctx, c.Stream)
	if err != nil {
		return nil, fmt.Errorf("bench: check: stream %s: %w", c.Stream, err)
	}
	si, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: check: stream %s: %w", c.Stream, err)
	}
	total := int(si.State.Msgs)
	var cons njs.Consumer
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err = s.OrderedConsumer(cctx, njs.OrderedConsumerConfig{})
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bench: check: stream %s: consumer: %w", c.Stream, err)
		}
	}

	r := &StreamCheck{PerPrefix: map[string]int{}}
	type place struct{ seq, idx uint64 } // a chunk, or a record of a chunk
	last := map[streamKey]place{}
	seenAt := map[streamKey]map[place]bool{}
	data := map[streamKey][]byte{}
	var order []streamKey
	var bad []string
	for r.Messages < total {
		batch, err := cons.Fetch(min(total-r.Messages, 500), njs.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("bench: check: fetch: %w", err)
		}
		for m := range batch.Messages() {
			r.Messages++
			id := m.Headers().Get(njs.MsgIDHeader)
			// A chunk carries Sluice-Seq; a node's record does not.
			rec := m.Headers().Get("Sluice-Seq") == ""
			k, at, ok := splitMsgID(id, rec)
			if !ok {
				return nil, fmt.Errorf("bench: check: message with id %q", id)
			}
			pl := place{at[0], at[1]}
			if _, seen := seenAt[k]; !seen {
				order = append(order, k)
				r.PerPrefix[k.prefix]++
				seenAt[k] = map[place]bool{}
			}
			body := m.Data()
			if rec {
				body = append(append([]byte(nil), body...), '\n') // a record, without its newline
			}
			prev, started := last[k]
			switch {
			case seenAt[k][pl]:
				r.ChunksTwice++
				bad = append(bad, fmt.Sprintf("%s.%d: %d.%d again", k.prefix, k.src, pl.seq, pl.idx))
				continue
			case started && (pl.seq < prev.seq || pl.seq == prev.seq && pl.idx < prev.idx):
				r.ChunksOutOfOrder++
				bad = append(bad, fmt.Sprintf("%s.%d: %d.%d after %d.%d", k.prefix, k.src, pl.seq, pl.idx, prev.seq, prev.idx))
			default:
				last[k] = pl
			}
			seenAt[k][pl] = true
			data[k] = append(data[k], body...)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, njs.ErrNoMessages) {
			return nil, fmt.Errorf("bench: check: fetch: %w", err)
		}
	}
	r.Sources = len(order)

	// Records, per source, then per sender.
	stored := map[string]int{}
	for _, k := range order {
		sc := bufio.NewScanner(bytes.NewReader(data[k]))
		sc.Buffer(nil, 1<<20)
		var sender string
		want := 0
		for sc.Scan() {
			name, rest, _ := strings.Cut(sc.Text(), " ")
			seqStr, _, _ := strings.Cut(rest, " ")
			seq, err := strconv.Atoi(seqStr)
			if err != nil {
				return nil, fmt.Errorf("bench: check: %s.%d: record %q", k.prefix, k.src, sc.Text())
			}
			if sender == "" {
				sender = name
				if _, dup := stored[sender]; dup {
					r.Mixed++
					bad = append(bad, fmt.Sprintf("sender %s's records in two sources", sender))
				}
			}
			switch {
			case name != sender:
				r.Mixed++
				bad = append(bad, fmt.Sprintf("%s.%d: records of %s and %s", k.prefix, k.src, sender, name))
			case seq == want:
				want++
				r.Stored++
			case seq < want:
				r.RecordsTwice++
			default:
				r.RecordsOutOfOrder++
				bad = append(bad, fmt.Sprintf("%s.%d: %s record %d before %d", k.prefix, k.src, sender, seq, want))
				want = seq + 1
			}
		}
		if sender == "" {
			continue
		}
		stored[sender] = want
		if n, ok := sent[sender]; ok && want < n {
			if c.Lossy != "" && (k.prefix == c.Lossy || strings.HasPrefix(k.prefix, c.Lossy+"-")) {
				r.CutSenders++
				r.LostLossy += n - want
			} else {
				r.Lost += n - want
				bad = append(bad, fmt.Sprintf("%s: sent %d records, %d stored", sender, n, want))
			}
		}
	}
	for name, n := range sent {
		r.Senders++
		r.Records += n
		if _, ok := stored[name]; !ok && n > 0 {
			r.Lost += n
			bad = append(bad, fmt.Sprintf("%s: sent %d records, none stored", name, n))
		}
	}

	prefixes := make([]string, 0, len(r.PerPrefix))
	for p, n := range r.PerPrefix {
		prefixes = append(prefixes, fmt.Sprintf("%s: %d", p, n))
	}
	slices.Sort(prefixes)
	fmt.Fprintf(out, "stream %s: %d messages from %d sources (%s)\n", c.Stream, r.Messages, r.Sources, strings.Join(prefixes, ", "))
	fmt.Fprintf(out, "  chunks: %d out of order, %d stored twice\n", r.ChunksOutOfOrder, r.ChunksTwice)
	fmt.Fprintf(out, "  records: %d senders sent %d; stored once and in order %d; out of order %d; twice %d; lost %d\n",
		r.Senders, r.Records, r.Stored, r.RecordsOutOfOrder, r.RecordsTwice, r.Lost)
	if c.Lossy != "" {
		fmt.Fprintf(out, "  killed node %s: %d of its senders cut off, %d of their records lost (read or in flight, never stored)\n",
			c.Lossy, r.CutSenders, r.LostLossy)
	}
	for _, b := range bad[:min(10, len(bad))] {
		fmt.Fprintf(out, "  %s\n", b)
	}
	if len(bad) > 0 || r.Mixed > 0 || r.RecordsTwice > 0 {
		return r, fmt.Errorf("bench: check: stream %s: %d problems", c.Stream, max(len(bad), r.RecordsTwice))
	}
	fmt.Fprintf(out, "  OK\n")
	return r, nil
}

// splitMsgID splits "<prefix>.<source>.<seq>" (a chunk) or, with rec,
// "<prefix>.<source>.<seq>.<index>" (a record of a chunk); the prefix may
// hold dots.
func splitMsgID(id string, rec bool) (k streamKey, at [2]uint64, ok bool) {
	n := 2
	if rec {
		n = 3
	}
	parts := strings.Split(id, ".")
	if len(parts) <= n {
		return streamKey{}, at, false
	}
	var nums [3]uint64
	for i := range n {
		v, err := strconv.ParseUint(parts[len(parts)-n+i], 10, 64)
		if err != nil {
			return streamKey{}, at, false
		}
		nums[i] = v
	}
	at[0] = nums[1]
	if rec {
		at[1] = nums[2]
	}
	return streamKey{strings.Join(parts[:len(parts)-n], "."), nums[0]}, at, true
}
