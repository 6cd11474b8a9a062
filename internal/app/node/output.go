package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
	"github.com/sluice-io/sluice/srcs/mqtt"
)

// output is where the node's chunks go. handle takes ownership of the
// chunk and releases it; it runs on the engine's handler goroutines, so
// concurrently for different sources.
type output interface {
	handle(en *entry, c engine.Chunk)
	close(ctx context.Context) error
	describe() string
	// records reports whether handle needs the chunk's entry.
	records() bool
}

func (n *Node) openOutput(stdout io.Writer) (output, error) {
	o := n.cfg.Output
	switch {
	case o.JetStream != nil:
		octx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		defer cancel()
		cfg := *o.JetStream
		cfg.IDPrefix = runPrefix(cfg.IDPrefix, time.Now())
		pub, err := jetstream.New(octx, cfg, jetstream.WithErrorHandler(func(err error) { n.log.Warn("jetstream", "err", err) }))
		if err != nil {
			at, err := authRefused(o.JetStream, err)
			return nil, fmt.Errorf("node: %s: %s: %w", n.path, at, err)
		}
		n.pub = pub
		return newJSOutput(pub, cfg)
	case o.Stdout != nil:
		return newWriterOutput(nopCloser{stdout}, "stdout", o.Stdout.Format, false, n.log), nil
	case o.File != nil:
		f, err := os.OpenFile(o.File.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("node: %s: output.file: %w", n.path, err)
		}
		return newWriterOutput(f, "file "+o.File.Path, o.File.Format, o.File.Sync, n.log), nil
	}
	return discard{}, nil
}

// discard counts nothing itself (the node counts) and releases.
type discard struct{}

func (discard) handle(_ *entry, c engine.Chunk) { c.Release() }
func (discard) close(context.Context) error     { return nil }
func (discard) describe() string                { return "none (chunks are counted and released)" }
func (discard) records() bool                   { return false }

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// maxOpenLine bounds the bytes of a line the records format holds for a
// source while it waits for the line's end: a longer run without a
// newline is written as a piece behind the truncated marker.
const maxOpenLine = 1 << 20

// writerOutput writes chunks to stdout or a file, one chunk at a time
// under a lock, so chunks of different sources never interleave.
//
// Format records writes what arrived, in whole lines: a line never holds
// two sources' bytes. Datagrams (udp) and MQTT messages are written one
// per line, their payload followed by a newline. A framed source's chunks
// hold whole records and are written as they are. An unframed source's
// bytes are written up to the last newline of each chunk; the bytes after
// it are held (copied; the chunk is released) until the same source sends
// the rest of the line. A record a source never finished (a framed
// chunk's Truncated tail, or the bytes an unframed source held when it
// ended or the drain cut it, or a run of maxOpenLine bytes without a
// newline) is written on a line of its own, behind a marker line:
//
//	sluice-truncated source=7 bytes=3 name="127.0.0.1:40312"
//	hel
//
// followed by exactly bytes bytes and one newline, as in the chunks format.
//
// Format chunks writes every chunk, data or end of stream, behind a
// header line:
//
//	sluice-chunk source=7 seq=0 bytes=5 flags=records name="127.0.0.1:40312"
//	hello
//
// followed by exactly bytes bytes and one newline. flags is the chunk's
// flags joined by | (partial, eos, datagrams, records, truncated) or 0;
// an end-of-stream chunk has bytes=0 and adds state= (closed or failed)
// and, if the source failed, err=.
type writerOutput struct {
	mu     sync.Mutex
	w      *bufio.Writer
	f      io.WriteCloser
	name   string
	chunks bool
	sync   bool
	err    error // the first write error; later writes are skipped
	log    *slog.Logger
	// open holds, per unframed source, the bytes of a line it has begun
	// and not yet ended (records format).
	open map[srcs.ID]*openLine
}

// openLine is the start of a line an unframed source has not ended yet.
type openLine struct {
	name string
	buf  []byte
}

func newWriterOutput(f io.WriteCloser, name, format string, sync bool, log *slog.Logger) *writerOutput {
	return &writerOutput{w: bufio.NewWriterSize(f, 256<<10), f: f, name: name, chunks: format == FormatChunks, sync: sync, log: log,
		open: map[srcs.ID]*openLine{}}
}

func (o *writerOutput) records() bool { return true }

func (o *writerOutput) describe() string {
	if o.chunks {
		return o.name + " (chunks)"
	}
	return o.name + " (records)"
}

func (o *writerOutput) handle(en *entry, c engine.Chunk) {
	defer c.Release()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return
	}
	if o.chunks {
		o.writeChunk(c)
	} else {
		if len(c.Data) > 0 {
			o.writeRecords(en, c)
		}
		if c.Flags&srcs.EndOfStream != 0 {
			o.endLine(c.Source)
		}
	}
	// Flush before the release: a released chunk has left the process
	// (a tail's checkpoint may move past it).
	err := o.w.Flush()
	if f, ok := o.f.(*os.File); ok && o.sync && err == nil {
		err = f.Sync()
	}
	if err != nil {
		o.err = err
		o.log.Error("output failed: what arrives from now on is released unwritten; /healthz reports it",
			"output", o.name, "err", err)
	}
}

func (o *writerOutput) writeChunk(c engine.Chunk) {
	w := o.w
	w.WriteString("sluice-chunk source=")
	w.WriteString(strconv.FormatUint(uint64(c.Source), 10))
	w.WriteString(" seq=")
	w.WriteString(strconv.FormatUint(c.Seq, 10))
	w.WriteString(" bytes=")
	w.WriteString(strconv.Itoa(len(c.Data)))
	w.WriteString(" flags=")
	w.WriteString(c.Flags.String())
	w.WriteString(" name=")
	w.WriteString(strconv.Quote(c.Name))
	if f := c.Final; f != nil {
		w.WriteString(" state=" + f.State.String())
		if f.State == engine.Failed && f.LastErr != nil {
			w.WriteString(" err=" + strconv.Quote(describeErr(f.LastErr)))
		}
	}
	w.WriteByte('\n')
	w.Write(c.Data)
	w.WriteByte('\n')
}

func (o *writerOutput) writeRecords(en *entry, c engine.Chunk) {
	w := o.w
	switch {
	case c.Flags&srcs.Datagrams != 0:
		srcs.ForEachDatagram(c.Data, func(p []byte) bool {
			w.Write(p)
			w.WriteByte('\n')
			return true
		})
	case en != nil && en.cfg.MQTT != nil:
		mqtt.ForEachMQTTMessage(c.Data, en.cfg.MQTT.Version, func(m mqtt.MQTTMessage) error {
			w.Write(m.Payload)
			w.WriteByte('\n')
			return nil
		})
	case c.Flags&srcs.Records != 0:
		whole := len(c.Data)
		if c.Flags&srcs.Truncated != 0 {
			if en != nil && en.framer != nil {
				_, whole, _ = srcs.CountRecords(en.framer, c.Data)
			} else {
				whole = bytes.LastIndexByte(c.Data, '\n') + 1
			}
		}
		w.Write(c.Data[:whole])
		if whole < len(c.Data) {
			o.writeTruncated(c.Source, c.Name, c.Data[whole:])
		}
	default:
		o.writeLines(c)
	}
}

// writeLines writes an unframed chunk up to its last newline, behind the
// line its source had begun, and holds the rest.
func (o *writerOutput) writeLines(c engine.Chunk) {
	ol := o.open[c.Source]
	i := bytes.LastIndexByte(c.Data, '\n')
	if i < 0 {
		if ol == nil {
			ol = &openLine{name: c.Name}
			o.open[c.Source] = ol
		}
		ol.buf = append(ol.buf, c.Data...)
		for len(ol.buf) >= maxOpenLine {
			o.writeTruncated(c.Source, ol.name, ol.buf[:maxOpenLine])
			ol.buf = append(ol.buf[:0], ol.buf[maxOpenLine:]...)
		}
		return
	}
	if ol != nil {
		o.w.Write(ol.buf)
		ol.buf = ol.buf[:0]
	}
	o.w.Write(c.Data[:i+1])
	if rest := c.Data[i+1:]; len(rest) > 0 {
		if ol == nil {
			ol = &openLine{name: c.Name}
			o.open[c.Source] = ol
		}
		ol.buf = append(ol.buf, rest...)
	} else if ol != nil {
		delete(o.open, c.Source)
	}
}

// endLine writes the line a source had begun and will never end, marked.
func (o *writerOutput) endLine(id srcs.ID) {
	if ol := o.open[id]; ol != nil {
		if len(ol.buf) > 0 {
			o.writeTruncated(id, ol.name, ol.buf)
		}
		delete(o.open, id)
	}
}

// writeTruncated writes a record its source never finished on a line of
// its own, behind the marker line.
func (o *writerOutput) writeTruncated(id srcs.ID, name string, p []byte) {
	w := o.w
	w.WriteString("sluice-truncated source=")
	w.WriteString(strconv.FormatUint(uint64(id), 10))
	w.WriteString(" bytes=")
	w.WriteString(strconv.Itoa(len(p)))
	w.WriteString(" name=")
	w.WriteString(strconv.Quote(name))
	w.WriteByte('\n')
	w.Write(p)
	w.WriteByte('\n')
}

func (o *writerOutput) close(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	err := o.err
	if err == nil {
		// Sources end before the output closes, so nothing should be
		// left; whatever is was cut.
		for id := range o.open {
			o.endLine(id)
		}
	}
	if ferr := o.w.Flush(); err == nil {
		err = ferr
	}
	if f, ok := o.f.(*os.File); ok {
		if serr := f.Sync(); err == nil && !errors.Is(serr, os.ErrInvalid) {
			err = serr
		}
	}
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", strings.TrimSpace(o.name), err)
	}
	return nil
}

// writeErr returns the output's first write error, for /healthz.
func (o *writerOutput) writeErr() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}
