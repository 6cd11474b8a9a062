package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/engine"
	"github.com/sluice-io/sluice/engine/jetstream"
	"github.com/sluice-io/sluice/srcs"
)

// JetStreamConfig configures the `jetstream` command: TCP sources into
// NATS JetStream through engine/jetstream, with the NATS server and the
// load generator in processes of their own, so that each process's CPU
// time is its own.
type JetStreamConfig struct {
	Conns   int         // TCP connections
	PerConn report.Size // bytes each connection sends
	Write   report.Size // bytes per write
	Runner  string      // engine runner
	Pending int         // jetstream max_pending
	BufSize report.Size // the engine's buffer size: the largest chunk, and so message
	Workers int         // the engine's workers; 0 for its default
	Storage string      // file or memory
	Inline  bool        // publish from where each chunk was read (engine.WithInlineHandler)
	// Pin puts sluice (this process, with the generator, whose loopback
	// sends do sluice's sockets' receive work) on the first half of the
	// allowed CPUs and the NATS server on the rest: one core each on a
	// 2-core machine, so that neither takes the other's.
	Pin bool
	// Records, if set, sends newline-ended records of RecordSize bytes,
	// frames the connections by newline, and publishes: "chunks", each
	// chunk as one message (as an unframed source's); "each", one message
	// per record, without its newline (a node's default); "batch", one
	// message per chunk's records with their ends in a header (a node's
	// records: batch).
	Records    string
	RecordSize int
	JSON       string // report file; "-" for stdout, "" for none
	// Check, if set, replaces the benchmark: read this stream and check
	// it (see StreamCheckConfig).
	Check StreamCheckConfig
}

// DefaultJetStreamBufSize is the engine's buffer size in the jetstream
// command: 256 KiB, as docs/jetstream.md recommends for a JetStream output. Each
// chunk is one message, and a message costs both ends the same whatever
// its size (a publish, an acknowledgement, a wake-up of the client's
// flusher), so larger buffers cost less per byte; larger still, up to the
// server's max_payload, gave no more here. The pool stays at 64 MiB.
const DefaultJetStreamBufSize = 256 << 10

// DefaultJetStreamConfig returns the documented defaults: 1,000
// connections of 1 MiB each, 1 GiB in all, a few seconds here: long
// enough that the cost of the path, not of opening 1,000 connections and
// an engine, makes the figures.
func DefaultJetStreamConfig() JetStreamConfig {
	return JetStreamConfig{Conns: 1000, PerConn: 1 << 20, Write: 16 << 10, Runner: engine.RunnerAuto,
		Pending: 1024, BufSize: DefaultJetStreamBufSize, Storage: "file", Pin: true, JSON: "-"}
}

// RegisterFlags defines c's flags on fs.
func (c *JetStreamConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Conns, "conns", c.Conns, "TCP connections (sources)")
	fs.Var(&c.PerConn, "per-conn", "bytes each connection sends (K, M, G suffixes)")
	fs.Var(&c.Write, "write", "bytes per write")
	fs.StringVar(&c.Runner, "runner", c.Runner, "auto, uring, epoll, goroutine or thread")
	fs.IntVar(&c.Workers, "workers", c.Workers, "event-loop workers of uring and epoll (default GOMAXPROCS, at most 8)")
	fs.Var(&c.BufSize, "buf-size", "the engine's buffer size, so the largest message (K, M suffixes); the pool stays at 64 MiB, and at least 256 buffers")
	fs.IntVar(&c.Pending, "max-pending", c.Pending, "unacknowledged publishes before sources wait")
	fs.StringVar(&c.Storage, "storage", c.Storage, "the stream's storage: file or memory")
	fs.BoolVar(&c.Inline, "inline", c.Inline, "publish from where each chunk was read, on the runner's worker (engine.WithInlineHandler), instead of from the engine's processing goroutines")
	fs.BoolVar(&c.Pin, "pin", c.Pin, "pin sluice and the generator to the first half of the CPUs and the NATS server to the rest (when there are 2 or more)")
	fs.StringVar(&c.Records, "records", c.Records, "send newline records of --record-size bytes and publish them as chunks, each (one message per record) or batch (one message per chunk's records)")
	fs.IntVar(&c.RecordSize, "record-size", c.RecordSize, "with --records: bytes per record, its newline included")
	fs.StringVar(&c.JSON, "json", c.JSON, "write the JSON report to `FILE` (- for stdout)")
	fs.StringVar(&c.Check.Stream, "check", "", "instead of the benchmark: read `STREAM` of newline records and check every source's order and every sender's records")
	fs.StringVar(&c.Check.URL, "url", "nats://127.0.0.1:4222", "with --check: the NATS servers, comma-separated")
	fs.StringVar(&c.Check.Sent, "sent", "", "with --check: a `FILE` of \"SENDER COUNT\" lines, what each sender sent")
	fs.StringVar(&c.Check.Lossy, "lossy", "", "with --check: the id `PREFIX` of a killed node, whose senders may have lost their last records")
}

// Validate checks c, naming the flag at fault.
func (c JetStreamConfig) Validate() error {
	switch {
	case c.Conns < 1 || c.Conns > 100000:
		return fmt.Errorf("--conns: %d: must be from 1 to 100000", c.Conns)
	case c.PerConn < 1:
		return fmt.Errorf("--per-conn: %d: must be positive", c.PerConn)
	case c.Write < 1 || c.Write > 16<<20:
		return fmt.Errorf("--write: %d: must be from 1 to 16M", c.Write)
	case c.BufSize < 4<<10 || c.BufSize > 8<<20:
		return fmt.Errorf("--buf-size: %d: must be from 4K to 8M (the server's max_payload)", c.BufSize)
	case c.Workers < 0 || c.Workers > 1024:
		return fmt.Errorf("--workers: %d: must be from 0 (default) to 1024", c.Workers)
	case c.Pending < 1:
		return fmt.Errorf("--max-pending: %d: must be positive", c.Pending)
	case c.Storage != "file" && c.Storage != "memory":
		return fmt.Errorf("--storage: %q: must be file or memory", c.Storage)
	case c.Records != "" && c.Records != "chunks" && c.Records != "each" && c.Records != "batch":
		return fmt.Errorf("--records: %q: must be chunks, each or batch", c.Records)
	case c.Records != "" && (c.RecordSize < 2 || c.RecordSize > int(c.BufSize)):
		return fmt.Errorf("--record-size: %d: must be from 2 to --buf-size", c.RecordSize)
	case c.Records != "" && int64(c.Write)%int64(c.RecordSize) != 0:
		return fmt.Errorf("--write: %d: must be a multiple of --record-size (%d)", c.Write, c.RecordSize)
	}
	return nil
}

// JetStreamReport is the `jetstream` command's JSON report. CPU figures
// are getrusage user+sys of each process over the whole run; the
// Transfer figures (Linux) are each process's CPU from the generator's
// start until the last chunk was acknowledged, without either one's
// start-up and shutdown.
type JetStreamReport struct {
	Command     string `json:"command"` // "jetstream"
	Runner      string `json:"runner"`
	Conns       int    `json:"conns"`
	Storage     string `json:"storage"`
	BufSize     int64  `json:"buf_size"`
	Bytes       uint64 `json:"bytes"`
	Messages    uint64 `json:"messages"`
	Records     string `json:"records,omitempty"`     // chunks, each or batch; empty: bytes without records
	RecordSize  int    `json:"record_size,omitempty"` // bytes per record, its newline included
	RecordCount uint64 `json:"record_count,omitempty"`
	// RecordsPerS is records over the transfer alone; the CPU figures
	// per record, in microseconds, over the transfer alone too.
	RecordsPerS               float64 `json:"records_per_s,omitempty"`
	TransferSluiceCPUUSPerRec float64 `json:"transfer_sluice_cpu_us_per_record,omitempty"`
	TransferServerCPUUSPerRec float64 `json:"transfer_server_cpu_us_per_record,omitempty"`
	Retries                   uint64  `json:"retries"`
	Pipelined                 uint64  `json:"pipelined"` // messages sent before the previous one of their source was acknowledged
	Rejected                  uint64  `json:"rejected"`  // pipelined messages JetStream refused (sent again behind the earlier one)
	DurationS                 float64 `json:"duration_s"`
	ThroughputBps             float64 `json:"throughput_bps"`
	SluiceCPUS                float64 `json:"sluice_cpu_s"`
	ServerCPUS                float64 `json:"server_cpu_s"`
	GeneratorCPUS             float64 `json:"generator_cpu_s"`
	SluiceCPUSPerGiB          float64 `json:"sluice_cpu_s_per_gib"`
	ServerCPUSPerGiB          float64 `json:"server_cpu_s_per_gib"`
	// TransferSluiceCPUSPerGiB and TransferServerCPUSPerGiB: CPU-s/GiB
	// over the transfer alone; zero where the server's CPU cannot be read
	// while it runs.
	TransferSluiceCPUSPerGiB float64 `json:"transfer_sluice_cpu_s_per_gib,omitempty"`
	TransferServerCPUSPerGiB float64 `json:"transfer_server_cpu_s_per_gib,omitempty"`
	GeneratorCPUSPerGiB      float64 `json:"generator_cpu_s_per_gib"`
	// Pinning says where sluice and the generator ran (EngineCPUs) and
	// the server (GenCPUs: the CPUs left to the others).
	Pinning bench.Pinning `json:"pinning"`
	// OthersCPUS is the CPU other processes used over the transfer (at
	// least: see harness.CPUShareSince); Notes says when that was enough
	// to share the measurement's cores.
	OthersCPUS float64      `json:"others_cpu_s"`
	Notes      []string     `json:"notes,omitempty"`
	Host       harness.Host `json:"host"`
}

// JetStream runs the `jetstream` command.
func JetStream(ctx context.Context, c JetStreamConfig, ios harness.IO) (*JetStreamReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Check.Stream != "" {
		_, err := CheckStream(ctx, c.Check, ios.Out)
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	store, err := os.MkdirTemp("", "sluice-jetstream-")
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	defer os.RemoveAll(store)

	// sluice here, the server on the CPUs left; the generator, started
	// from here, on sluice's.
	pin, unpin := bench.PinApart(c.Pin)
	defer unpin()
	fmt.Fprintf(ios.Err, "sluice-bench jetstream: %s\n", pinNote(pin))

	// The server: this binary again, as the hidden natsd command.
	srv := exec.Command(self, "natsd", "--store", store)
	srvIn, _ := srv.StdinPipe()
	srvOut, _ := srv.StdoutPipe()
	srv.Stderr = ios.Err
	if err := harness.StartOnCPUs(srv, pin.GenCPUs); err != nil {
		return nil, fmt.Errorf("bench: jetstream: start server: %w", err)
	}
	defer func() {
		srvIn.Close()
		srv.Wait()
	}()
	url, err := bufio.NewReader(srvOut).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: server did not start: %w", err)
	}
	url = strings.TrimSpace(url)
	go io.Copy(io.Discard, srvOut)

	cpu0 := harness.CPUTime()
	pub, err := jetstream.New(ctx, jetstream.Config{URL: url, Subject: "bench.ingest", Stream: "BENCH", Storage: c.Storage, MaxPending: c.Pending})
	if err != nil {
		return nil, err
	}
	eos := make(chan struct{}, c.Conns)
	h := func(ch engine.Chunk) {
		if ch.Flags&srcs.EndOfStream != 0 {
			eos <- struct{}{}
		}
		switch c.Records {
		case "each", "batch":
			pub.Publish(ch, recordMessages(pub.IDPrefix(), ch, c.Records == "batch"))
		default:
			pub.Handle(ch)
		}
	}
	deliver := engine.WithHandler(h)
	if c.Inline {
		deliver = engine.WithInlineHandler(h)
	}
	e, err := engine.New(engine.Config{Runner: c.Runner, Workers: c.Workers, Buffers: max(256, int(64<<20/c.BufSize)), BufSize: int(c.BufSize)}, deliver)
	if err != nil {
		pub.Close(context.Background())
		return nil, err
	}
	lc := srcs.ListenerConfig{}
	if c.Records != "" {
		lc.Framer = srcs.Newline{}
	}
	ln, err := srcs.ListenTCP("127.0.0.1:0", lc)
	if err == nil {
		err = e.AddListener(ln)
	}
	if err != nil {
		e.Shutdown(context.Background())
		pub.Close(context.Background())
		return nil, err
	}
	fmt.Fprintf(ios.Err, "sluice-bench jetstream: %d connections x %s into %s (runner %s, %s storage)\n",
		c.Conns, report.FormatBytes(uint64(c.PerConn)), url, e.Runner(), c.Storage)

	t0 := time.Now()
	others := harness.MarkCPU() // what other processes use meanwhile: see BusyNote
	sluiceT0 := harness.CPUTime()
	srvT0, srvTOK := harness.ProcCPU(srv.Process.Pid)
	gen := exec.CommandContext(ctx, self, "jsgen", "--addr", ln.Addr().String(), "--conns", strconv.Itoa(c.Conns),
		"--per-conn", strconv.FormatInt(int64(c.PerConn), 10), "--write", strconv.FormatInt(int64(c.Write), 10),
		"--record-size", strconv.Itoa(c.RecordSize))
	gen.Stderr = ios.Err
	genErr := harness.StartOnCPUs(gen, pin.EngineCPUs)
	if genErr == nil {
		genErr = gen.Wait()
	}
	var genCPU time.Duration
	if gen.ProcessState != nil {
		genCPU = gen.ProcessState.UserTime() + gen.ProcessState.SystemTime()
	}
	var waitErr error
	var transfer time.Duration
	if genErr == nil {
		for range c.Conns {
			select {
			case <-eos:
			case <-ctx.Done():
				waitErr = ctx.Err()
			}
			if waitErr != nil {
				break
			}
		}
	}
	// Shutdown returns once every chunk was released: acknowledged.
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shutErr := e.Shutdown(sctx)
	transfer = time.Since(t0)
	sluiceT := harness.CPUTime() - sluiceT0
	srvT1, srvT1OK := harness.ProcCPU(srv.Process.Pid)
	share, shareOK := harness.CPUShareSince(others)
	err = errors.Join(genErr, waitErr, shutErr, pub.Close(sctx))
	d := time.Since(t0)
	cpu := harness.CPUTime() - cpu0
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	srvIn.Close() // natsd exits when its stdin closes
	if err := srv.Wait(); err != nil {
		return nil, fmt.Errorf("bench: jetstream: server: %w", err)
	}
	srvCPU := srv.ProcessState.UserTime() + srv.ProcessState.SystemTime()

	st := pub.Stats()
	tot := e.Totals()
	gib := float64(tot.Bytes) / (1 << 30)
	rep := &JetStreamReport{
		Command: "jetstream", Runner: e.Runner(), Conns: c.Conns, Storage: c.Storage,
		Bytes: tot.Bytes, BufSize: int64(c.BufSize), Messages: st.Acked, Retries: st.Retries, Pipelined: st.Pipelined, Rejected: st.Rejected,
		DurationS: d.Seconds(), ThroughputBps: float64(tot.Bytes) / d.Seconds(),
		SluiceCPUS: cpu.Seconds(), ServerCPUS: srvCPU.Seconds(), GeneratorCPUS: genCPU.Seconds(),
		Pinning: pin, Host: harness.HostInfo(),
	}
	if shareOK {
		rep.OthersCPUS = share.Others
		if harness.BusyNote(share, rep.Host.CPUs) != "" {
			n := fmt.Sprintf("busy machine: other processes used at least %.2f CPU-s over the %.2fs transfer (%.2f CPUs on average); "+
				"they shared sluice's and the server's cores, so records/s and throughput are lower than on a quiet machine (each process's CPU is still its own)",
				share.Others, share.Seconds, share.Others/share.Seconds)
			rep.Notes = append(rep.Notes, n)
			fmt.Fprintf(ios.Err, "sluice-bench jetstream: %s\n", n)
		}
	}
	if gib > 0 {
		rep.SluiceCPUSPerGiB = rep.SluiceCPUS / gib
		rep.ServerCPUSPerGiB = rep.ServerCPUS / gib
		rep.GeneratorCPUSPerGiB = rep.GeneratorCPUS / gib
		if srvTOK && srvT1OK {
			rep.TransferSluiceCPUSPerGiB = sluiceT.Seconds() / gib
			rep.TransferServerCPUSPerGiB = (srvT1 - srvT0).Seconds() / gib
		}
	}
	if c.Records != "" {
		rep.Records, rep.RecordSize = c.Records, c.RecordSize
		rep.RecordCount = tot.Bytes / uint64(c.RecordSize)
		rep.RecordsPerS = float64(rep.RecordCount) / transfer.Seconds()
		if srvTOK && srvT1OK && rep.RecordCount > 0 {
			rep.TransferSluiceCPUUSPerRec = sluiceT.Seconds() * 1e6 / float64(rep.RecordCount)
			rep.TransferServerCPUUSPerRec = (srvT1 - srvT0).Seconds() * 1e6 / float64(rep.RecordCount)
		}
		fmt.Fprintf(ios.Err, "sluice-bench jetstream: %d records of %d bytes as %s: %.0f records/s; CPU per record: sluice %.2f us, nats-server %.2f us\n",
			rep.RecordCount, rep.RecordSize, rep.Records, rep.RecordsPerS, rep.TransferSluiceCPUUSPerRec, rep.TransferServerCPUUSPerRec)
	}
	if want := uint64(c.Conns) * uint64(c.PerConn); tot.Bytes != want {
		return rep, fmt.Errorf("bench: jetstream: received %d bytes, sent %d", tot.Bytes, want)
	}
	fmt.Fprintf(ios.Err, "sluice-bench jetstream: %s in %.2fs, %s, %d messages (%d pipelined, %d rejected); CPU-s/GiB: sluice %.2f, nats-server %.2f, generator %.2f\n",
		report.FormatBytes(rep.Bytes), rep.DurationS, report.FormatRate(rep.ThroughputBps), rep.Messages, rep.Pipelined, rep.Rejected,
		rep.SluiceCPUSPerGiB, rep.ServerCPUSPerGiB, rep.GeneratorCPUSPerGiB)
	if rep.TransferServerCPUSPerGiB > 0 {
		fmt.Fprintf(ios.Err, "sluice-bench jetstream: the transfer alone: sluice %.2f, nats-server %.2f CPU-s/GiB, sluice/server %.2f (whole run %.2f)\n",
			rep.TransferSluiceCPUSPerGiB, rep.TransferServerCPUSPerGiB, rep.TransferSluiceCPUSPerGiB/rep.TransferServerCPUSPerGiB,
			rep.SluiceCPUSPerGiB/rep.ServerCPUSPerGiB)
	}
	if c.JSON != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		b = append(b, '\n')
		if c.JSON == "-" {
			_, err = ios.Out.Write(b)
		} else {
			err = os.WriteFile(c.JSON, b, 0o644)
		}
		if err != nil {
			return rep, fmt.Errorf("bench: jetstream: --json: %w", err)
		}
	}
	return rep, nil
}

// pinNote says where the processes run.
func pinNote(p bench.Pinning) string {
	if p.Enabled {
		return fmt.Sprintf("sluice and the generator on CPUs %v, nats-server on CPUs %v", p.EngineCPUs, p.GenCPUs)
	}
	return "no pinning: " + p.Note
}

// RunNatsd runs an embedded NATS server with JetStream, storing in store,
// prints its client URL on out, and stops when in reaches its end (the
// parent closed the pipe or exited). It is the hidden natsd command.
func RunNatsd(store string, in io.Reader, out io.Writer) error {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: store, NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		return fmt.Errorf("bench: natsd: %w", err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("bench: natsd: server did not start")
	}
	fmt.Fprintln(out, ns.ClientURL())
	io.Copy(io.Discard, in)
	return nil
}

// RunJSGen opens conns connections to addr at once and sends perConn
// bytes on each in writes of write bytes, then closes them; with record
// above 0, the bytes are records of that size, each ending in a newline.
// It is the hidden jsgen command.
func RunJSGen(ctx context.Context, addr string, conns int, perConn, write, record int64) error {
	buf := make([]byte, write)
	for i := range buf {
		buf[i] = byte('a' + i%26)
		if record > 0 && int64(i)%record == record-1 {
			buf[i] = '\n'
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	var d net.Dialer
	for range conns {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("bench: jsgen: %w", err)
		}
		wg.Go(func() {
			defer c.Close()
			for left := perConn; left > 0; {
				n, err := c.Write(buf[:min(left, write)])
				if err != nil {
					errs <- err
					return
				}
				left -= int64(n)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// recordMessages cuts a newline-framed chunk into its records, as a
// node's jetstream output does: one message per record without its
// newline, or with batch one message of the chunk's records with their
// ends in the Sluice-Record-Ends header. The ids are the run's.
func recordMessages(prefix string, ch engine.Chunk, batch bool) []jetstream.Message {
	if len(ch.Data) == 0 {
		return nil
	}
	id := func(i int) string {
		return prefix + "." + strconv.FormatUint(uint64(ch.Source), 10) + "." + strconv.FormatUint(ch.Seq, 10) + "." + strconv.Itoa(i)
	}
	var msgs []jetstream.Message
	var body, ends []byte
	for at, i := 0, 0; at < len(ch.Data); i++ {
		n := bytes.IndexByte(ch.Data[at:], '\n')
		if n < 0 {
			break
		}
		rec := ch.Data[at : at+n]
		at += n + 1
		if !batch {
			msgs = append(msgs, jetstream.Message{ID: id(i), Data: rec})
			continue
		}
		if len(ends) > 0 {
			ends = append(ends, ',')
		}
		body = append(body, rec...)
		ends = strconv.AppendInt(ends, int64(len(body)), 10)
	}
	if batch && len(ends) > 0 {
		msgs = append(msgs, jetstream.Message{ID: id(0), Data: body, Header: []jetstream.Field{{Key: jetstream.HeaderRecordEnds, Value: string(ends)}}})
	}
	return msgs
}
