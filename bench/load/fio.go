package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"time"

	"github.com/sluice-io/sluice/bench/harness"
)

// fio's net engine and its limits.
const (
	// FioTrailer is what fio's net engine writes when it closes a TCP
	// connection: its close message, a 4-byte magic and a 4-byte command
	// (engines/net.c, struct udp_close_msg). Neither holds a '\n'.
	FioTrailer = 8
	// FioMaxJobs is fio's ceiling on jobs in one run.
	FioMaxJobs = 4096
	// FioMaxPattern is the longest buffer_pattern fio takes
	// (MAX_PATTERN_SIZE).
	FioMaxPattern = 512
	// DefaultFioRecordSize is the line length of `run --client fio
	// --framing newline`.
	DefaultFioRecordSize = 128
	// FioSinkIdle is how long a sink fed by fio waits, once every
	// connection has closed and nothing arrives, before it reports.
	FioSinkIdle = 500 * time.Millisecond
)

// FioJob is one row's fio load: Sources jobs, each one TCP connection to
// Addr writing BS-byte blocks for Duration, at Rate bytes per second each
// (0: flat out) with Poisson or evenly spaced arrivals, filled with
// '\n'-terminated lines of RecordSize bytes when RecordSize > 0.
type FioJob struct {
	// Proto is ProtoTCP ("": the same) or ProtoUDP: each job then sends
	// BS-byte datagrams from a socket of its own.
	Proto      string
	Addr       string
	Sources    int
	Duration   time.Duration
	BS         int
	Rate       float64
	Arrivals   string
	RecordSize int
	NoDelay    bool
	CPUs       []int
}

// File returns the fio job file: one job section per source, all on
// Addr (the sink listens on one port), time-based, so every connection
// lives for the whole duration. The size is out of reach, since fio's net
// engine would reconnect on wrapping around it.
func (j FioJob) File() string {
	host, port, _ := net.SplitHostPort(j.Addr)
	var b strings.Builder
	proto := ProtoTCP
	if j.Proto == ProtoUDP {
		proto = ProtoUDP
	}
	fmt.Fprintf(&b, "[global]\nioengine=net\nprotocol=%s\nhostname=%s\nport=%s\nrw=write\nbs=%d\nsize=1t\n", proto, host, port, j.BS)
	fmt.Fprintf(&b, "time_based=1\nruntime=%dms\nthread=1\ngroup_reporting=0\n", j.Duration.Milliseconds())
	if j.NoDelay && proto == ProtoTCP {
		b.WriteString("nodelay=1\n")
	}
	if j.Rate > 0 {
		fmt.Fprintf(&b, "rate=%d\n", int64(j.Rate))
		if j.Arrivals == ArrivalsPoisson {
			b.WriteString("rate_process=poisson\n")
		}
	}
	if j.RecordSize > 0 {
		// Every block starts at the pattern's start (fio fills each
		// buffer with the pattern repeated), and the blocks are a whole
		// number of lines. scramble_buffers would overwrite bytes of the
		// pattern on every write.
		fmt.Fprintf(&b, "scramble_buffers=0\nbuffer_pattern=0x%s0a\n", strings.Repeat("78", j.RecordSize-1))
	}
	if len(j.CPUs) > 0 {
		fmt.Fprintf(&b, "cpus_allowed=%s\n", harness.JoinInts(j.CPUs))
	}
	for i := range j.Sources {
		fmt.Fprintf(&b, "[s%d]\n", i+1)
	}
	return b.String()
}

// FioReport is the part of fio's JSON output the bench reads.
type FioReport struct {
	Version string         `json:"fio version"`
	Jobs    []FioJobReport `json:"jobs"`
}

// FioJobReport is one job of fio's report.
type FioJobReport struct {
	Name       string `json:"jobname"`
	Error      int    `json:"error"`
	JobRuntime int64  `json:"job_runtime"` // ms
	Write      struct {
		IOBytes uint64 `json:"io_bytes"`
		// TotalIOs is the writes fio made: with protocol=udp, the
		// datagrams it sent.
		TotalIOs uint64 `json:"total_ios"`
	} `json:"write"`
}

// ParseFioNet reads the JSON report of fio's net jobs; fio may print notes
// before it.
func ParseFioNet(b []byte) (*FioReport, error) {
	if i := bytes.IndexByte(b, '{'); i > 0 {
		b = b[i:]
	}
	var r FioReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: fio: bad report: %w", err)
	}
	return &r, nil
}

// Sent is the bytes fio wrote, its trailers left out.
func (r *FioReport) Sent() uint64 {
	var n uint64
	for _, j := range r.Jobs {
		n += j.Write.IOBytes
	}
	return n
}

// FindFio returns the fio binary, or why there is none.
func FindFio() (string, error) {
	p, err := exec.LookPath("fio")
	if err != nil {
		return "", errors.New("bench: --client fio: fio is not installed (apt-get install fio, or make deps)")
	}
	return p, nil
}

// Protocols of `run` and `sink`.
const (
	ProtoTCP = "tcp"
	ProtoUDP = "udp"
)

// Clients of `run`: what sends the load.
const (
	// ClientGen is the built-in generator (the hidden `gen` subcommand).
	ClientGen = "gen"
	// ClientFio is fio's net engine: one job, thread and TCP connection
	// per source, written by people who did not write sluice.
	ClientFio = "fio"
)
