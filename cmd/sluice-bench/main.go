// Command sluice-bench benchmarks the sluice engine: it compares runners
// side by side under a built-in load generator (run), serves as a sink for
// external load generators such as fio (sink), ingests files (file),
// sweeps offered load for latency curves (latency), and reports what the
// kernel offers (probe). The logic lives in package bench and its rooms
// (one package per scenario); this is a thin driver.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/arrivals"
	"github.com/sluice-io/sluice/bench/file"
	"github.com/sluice-io/sluice/bench/floor"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/idle"
	"github.com/sluice-io/sluice/bench/jetstream"
	"github.com/sluice-io/sluice/bench/latency"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/probe"
	"github.com/sluice-io/sluice/bench/report"
	"github.com/sluice-io/sluice/bench/run"
	"github.com/sluice-io/sluice/bench/sink"
	"github.com/sluice-io/sluice/bench/wirecheck"
)

const usage = `usage: sluice-bench <command> [flags]

commands:
  run      compare runners under the built-in load generator (what make bench runs); --proto udp for datagrams
  sink     the engine alone, listening for external load generators (fio); --proto udp for datagrams
  file     ingest files through each runner; compare with a read loop and fio
  latency  open-loop sweep of offered load: p50/p99/p99.9 latency against throughput
  arrivals how a paced load's messages reach a sink, from the built-in generator and from fio
  floor    the engine's own cost per chunk, with in-memory sources and no kernel
  probe    what the kernel offers, and which runner auto picks and why
  jetstream  TCP sources into NATS JetStream: throughput, CPU per GiB of sluice and the server
  idle     many idle connections beside a few active ones: memory, threads and accept time per connection, per runner
  hold     open idle connections to a sink that runs on its own (a node) and hold them until interrupted
  wire-check  one round over the veth wire (as root): on which CPU each side's packets are received
  tables   regenerate the performance tables of Markdown files from the JSON reports they name

Run 'sluice-bench <command> --help' for a command's flags.
`

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the benchmark failed or found a mismatch
	exitUsage   = 2 // bad command line
)

func main() { os.Exit(cli(os.Args[1:])) }

// command is one subcommand: its flags, and what it does with them.
type command struct {
	register func(*flag.FlagSet)
	validate func() error
	exec     func(ctx context.Context, ios harness.IO) error
}

func cli(args []string) int {
	ios := harness.StdIO()
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	name, args := args[0], args[1:]
	var cmd command
	switch name {
	case "run":
		c := run.DefaultRunConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := run.Run(ctx, c, ios)
			return err
		}}
	case "sink":
		c := sink.DefaultSinkConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := sink.Sink(ctx, c, ios)
			return err
		}}
	case "file":
		c := file.DefaultFileConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := file.File(ctx, c, ios)
			return err
		}}
	case "latency":
		c := latency.DefaultLatencyConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := latency.LatencySweep(ctx, c, ios)
			return err
		}}
	case "arrivals":
		c := arrivals.DefaultArrivalsConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := arrivals.ArrivalsStudy(ctx, c, ios)
			return err
		}}
	case "floor":
		c := floor.DefaultFloorConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := floor.Floor(ctx, c, ios)
			return err
		}}
	case "probe":
		var c probe.ProbeConfig
		cmd = command{c.RegisterFlags, func() error { return nil }, func(_ context.Context, ios harness.IO) error {
			_, err := probe.Probe(c, ios)
			return err
		}}
	case "jetstream":
		c := jetstream.DefaultJetStreamConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := jetstream.JetStream(ctx, c, ios)
			return err
		}}
	case "idle":
		if len(args) > 0 && idle.IsIdleChild(args[0]) {
			// hidden: the sink and the idle client that idle starts
			role := args[0]
			args = args[1:]
			cmd = command{func(*flag.FlagSet) {}, func() error { return nil }, func(ctx context.Context, _ harness.IO) error {
				return idle.RunIdleChild(ctx, role, os.Stdin, os.Stdout, os.Stderr)
			}}
			break
		}
		c := idle.DefaultIdleConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := idle.Idle(ctx, c, ios)
			return err
		}}
	case "hold":
		c := load.DefaultHoldConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			return load.Hold(ctx, c, ios)
		}}
	case "wire-check":
		c := wirecheck.DefaultWireCheckConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, ios harness.IO) error {
			_, err := wirecheck.WireCheck(ctx, c, ios)
			return err
		}}
	case "tables":
		files := report.StringList{"README.md"}
		var check bool
		cmd = command{func(fs *flag.FlagSet) {
			fs.Var(&files, "files", "comma-separated Markdown files whose performance tables to regenerate")
			fs.BoolVar(&check, "check", false, "change nothing; fail if a table differs from its reports")
		}, func() error { return nil }, func(_ context.Context, ios harness.IO) error {
			return report.RefreshTables(files, check, ios.Out)
		}}
	case "natsd": // hidden: the NATS server process that jetstream starts
		var store string
		cmd = command{func(fs *flag.FlagSet) { fs.StringVar(&store, "store", "", "JetStream store directory") },
			func() error { return nil }, func(_ context.Context, _ harness.IO) error {
				return jetstream.RunNatsd(store, os.Stdin, os.Stdout)
			}}
	case "jsgen": // hidden: the load generator process that jetstream starts
		var addr string
		var conns int
		var per, write, record int64
		cmd = command{func(fs *flag.FlagSet) {
			fs.StringVar(&addr, "addr", "", "address")
			fs.IntVar(&conns, "conns", 1, "connections")
			fs.Int64Var(&per, "per-conn", 1, "bytes per connection")
			fs.Int64Var(&write, "write", 1, "bytes per write")
			fs.Int64Var(&record, "record-size", 0, "newline-ended records of this size (0: letters without newlines)")
		}, func() error { return nil }, func(ctx context.Context, _ harness.IO) error {
			return jetstream.RunJSGen(ctx, addr, conns, per, write, record)
		}}
	case "gen": // hidden: the load generator process that run and latency start
		c := load.DefaultGenConfig()
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, _ harness.IO) error {
			return load.RunGen(ctx, c, os.Stdin, os.Stdout)
		}}
	case "quiet": // hidden: the quiet source that run --quiet-source starts
		var c load.QuietConfig
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, _ harness.IO) error {
			return load.RunQuiet(ctx, c, os.Stdin, os.Stdout)
		}}
	case "udpgen": // hidden: the UDP load that run --proto udp --client gen starts
		var c load.UDPGenConfig
		cmd = command{c.RegisterFlags, func() error { return c.Validate() }, func(ctx context.Context, _ harness.IO) error {
			return load.RunUDPGen(ctx, c, os.Stdout)
		}}
	case bench.ChildCommand: // hidden: one runner's engine, in a fresh process
		cmd = command{func(*flag.FlagSet) {}, func() error { return nil }, func(ctx context.Context, _ harness.IO) error {
			return bench.RunChild(ctx, os.Stdin, os.Stdout, os.Stderr)
		}}
	case "help", "-h", "-help", "--help":
		fmt.Fprint(os.Stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(os.Stderr, "sluice-bench: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}

	fs := flag.NewFlagSet("sluice-bench "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cmd.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Fprintf(os.Stdout, "usage: sluice-bench %s [flags]\n\nflags:\n", name)
			fs.PrintDefaults()
			return exitOK
		}
		fmt.Fprintf(os.Stderr, "sluice-bench %s: %v\n(see sluice-bench %s --help)\n", name, err, name)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sluice-bench %s: unexpected argument %q (flags only)\n", name, fs.Arg(0))
		return exitUsage
	}
	if err := cmd.validate(); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-bench %s: %v\n", name, err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.exec(ctx, ios); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-bench %s: %v\n", name, err)
		return exitFailure
	}
	return exitOK
}
