package node

import (
	"bufio"
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
)

// output is where the node's chunks go. handle takes ownership of the
// chunk and releases it; it runs on the engine's handler goroutines, so
// concurrently for different sources.
type output interface {
	handle(en *entry, c engine.Chunk)
	close(ctx context.Context) error
	describe() string
}

func (n *Node) openOutput(stdout io.Writer) (output, error) {
	o := n.cfg.Output
	switch {
	case o.JetStream != nil:
		octx, cancel := context.WithTimeout(n.ctx, 30*time.Second)
		defer cancel()
		pub, err := jetstream.New(octx, *o.JetStream, jetstream.WithErrorHandler(func(err error) { n.log.Warn("jetstream", "err", err) }))
		if err != nil {
			at, err := authRefused(o.JetStream, err)
			return nil, fmt.Errorf("node: %s: %s: %w", n.path, at, err)
		}
		n.pub = pub
		return jsOutput{pub, o.JetStream.Subject}, nil
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

func (discard) handle(_ *entry, c engine.Chunk)    { c.Release() }
func (discard) close(context.Context) error        { return nil }
func (discard) describe() string                   { return "none (chunks are counted and released)" }
func (j jsOutput) handle(_ *entry, c engine.Chunk) { j.pub.Handle(c) }
func (j jsOutput) close(ctx context.Context) error { return j.pub.Close(ctx) }
func (j jsOutput) describe() string                { return "jetstream subject " + j.subject }

type jsOutput struct {
	pub     *jetstream.Publisher
	subject string
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// writerOutput writes chunks to stdout or a file, one chunk at a time
// under a lock, so chunks of different sources never interleave.
//
// Format records writes what arrived: a chunk's bytes as they are (a
// framed source's chunks hold whole records, so lines stay whole), except
// that datagrams (udp) and MQTT messages are written one per line, their
// payload followed by a newline. Format chunks writes every chunk, data
// or end of stream, behind a header line:
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
}

func newWriterOutput(f io.WriteCloser, name, format string, sync bool, log *slog.Logger) *writerOutput {
	return &writerOutput{w: bufio.NewWriterSize(f, 256<<10), f: f, name: name, chunks: format == FormatChunks, sync: sync, log: log}
}

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
	} else if len(c.Data) > 0 {
		o.writeRecords(en, c)
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
			w.WriteString(" err=" + strconv.Quote(unwrapSource(f.LastErr).Error()))
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
		srcs.ForEachMQTTMessage(c.Data, en.cfg.MQTT.Version, func(m srcs.MQTTMessage) error {
			w.Write(m.Payload)
			w.WriteByte('\n')
			return nil
		})
	default:
		w.Write(c.Data)
	}
}

func (o *writerOutput) close(context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	err := o.err
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
