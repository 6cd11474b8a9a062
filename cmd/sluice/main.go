// Command sluice runs an ingest node: sources listed in a YAML file are
// ingested through the sluice engine into one output, with Prometheus
// metrics, a health check and a drain on SIGINT or SIGTERM. The node
// itself is package internal/app/node; this is a thin driver.
//
//	sluice run -c node.yaml     run a node until SIGINT or SIGTERM, then drain
//	sluice check -c node.yaml   check a node file and print it resolved
//	sluice probe                what this machine offers (io_uring, runners)
//	sluice version              the build's version
//
// Exit statuses: 0 done; 1 failed (a start-up or drain error, or a
// second signal forced exit); 2 bad command line or node file; 3 drained,
// but a source of the node file had failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"

	"github.com/sluice-io/sluice/internal/app/node"
)

const usage = `usage: sluice <command> [flags]

commands:
  run      run an ingest node until SIGINT or SIGTERM, then drain
  check    check a node file without opening anything, and print it resolved
  probe    what this machine offers: io_uring, and which runners can start
  version  the build's version

The node file is -c FILE, else $SLUICE_CONFIG, else ` + defaultConfig + `.
Run 'sluice <command> --help' for a command's flags.
`

// defaultConfig is the node file when neither -c nor SLUICE_CONFIG names one.
const defaultConfig = "/etc/sluice/node.yaml"

// Exit statuses.
const (
	exitOK            = 0
	exitFailure       = 1
	exitUsage         = 2
	exitSourcesFailed = 3
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, args := args[0], args[1:]
	fl := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	var config, metrics string
	var pprof bool
	switch name {
	case "run", "check":
		fl.StringVar(&config, "c", "", "the node file (default: $SLUICE_CONFIG, else "+defaultConfig+")")
		fl.StringVar(&config, "config", "", "the node file (same as -c)")
	}
	if name == "run" {
		fl.StringVar(&metrics, "metrics", "", "serve /metrics and /healthz on `ADDR`, overriding metrics.listen")
		fl.BoolVar(&pprof, "pprof", false, "also serve /debug/pprof/ on the metrics endpoint")
	}
	switch name {
	case "run", "check", "probe", "version":
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "usage: sluice %s [flags]\n\nflags:\n", name)
			fl.SetOutput(stdout)
			fl.PrintDefaults()
			return exitOK
		}
		fmt.Fprintf(stderr, "sluice %s: %v\n(see sluice %s --help)\n", name, err, name)
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice %s: unexpected argument %q: the node file goes after -c\n", name, fl.Arg(0))
		return exitUsage
	}
	switch name {
	case "version":
		fmt.Fprintln(stdout, version())
		return exitOK
	case "probe":
		if err := node.Probe(stdout); err != nil {
			fmt.Fprintf(stderr, "sluice probe: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	path, flagName := resolveConfig(config)
	cfg, err := node.Load(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(stderr, "sluice %s: %s: %s: no such file\n", name, flagName, path)
		} else {
			fmt.Fprintf(stderr, "sluice %s: %v\n", name, err)
		}
		return exitUsage
	}
	if name == "check" {
		return check(cfg, path, stdout, stderr)
	}
	// From here on every line on standard error is a log line in the
	// format the node file asks for.
	log, err := node.NewLogger(cfg.Log, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice run: %v\n", err)
		return exitUsage
	}
	if pprof && metrics == "" && cfg.Metrics.Listen == "" {
		log.Error("cannot start: --pprof: needs --metrics or metrics.listen", "config", path)
		return exitUsage
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, node.Signals()...)
	defer signal.Stop(sigs)
	n, err := node.New(cfg, node.WithConfigPath(path), node.WithMetrics(metrics, pprof), node.WithLogger(log), node.WithStdout(stdout))
	if err != nil {
		log.Error("cannot start", "err", err)
		var ce *node.ConfigError
		if errors.As(err, &ce) {
			return exitUsage
		}
		return exitFailure
	}
	_, err = n.Run(context.Background(), sigs)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, node.ErrSourcesFailed):
		log.Error("exiting: sources failed", "err", err)
		return exitSourcesFailed
	default:
		log.Error("exiting", "err", err)
		return exitFailure
	}
}

// resolveConfig picks the node file, and says where the name came from
// for messages: -c, SLUICE_CONFIG, or the default.
func resolveConfig(flagValue string) (path, from string) {
	switch {
	case flagValue != "":
		return flagValue, "-c"
	case os.Getenv("SLUICE_CONFIG") != "":
		return os.Getenv("SLUICE_CONFIG"), "SLUICE_CONFIG"
	}
	return defaultConfig, "the default node file (no -c, no SLUICE_CONFIG)"
}

// check prints the resolved configuration, and notes what would stop the
// node at start-up that the file alone cannot show (a missing file).
func check(cfg node.Config, path string, stdout, stderr io.Writer) int {
	out, err := cfg.Resolved()
	if err != nil {
		fmt.Fprintf(stderr, "sluice check: %v\n", err)
		return exitFailure
	}
	stdout.Write(out)
	if cfg.Output.JetStream != nil {
		for i, s := range cfg.Sources {
			g, why := node.SourceGuarantee(cfg, s)
			fmt.Fprintf(stderr, "sluice check: %s: sources[%d] (%s) into jetstream: %s: %s\n", path, i, s.Name(), g, why)
		}
	}
	notes := node.Preflight(cfg)
	for _, n := range notes {
		fmt.Fprintf(stderr, "sluice check: %s: warning: %s\n", path, n)
	}
	fmt.Fprintf(stderr, "sluice check: %s: ok (%d sources", path, len(cfg.Sources))
	if len(notes) > 0 {
		fmt.Fprintf(stderr, "; %d warnings", len(notes))
	}
	fmt.Fprintln(stderr, ")")
	return exitOK
}

// version names the module version, the commit and the Go release the
// binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "sluice (unknown build)"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var parts []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			parts = append(parts, "commit "+s.Value)
		case "vcs.time":
			parts = append(parts, "built from a commit of "+s.Value)
		case "vcs.modified":
			if s.Value == "true" {
				parts = append(parts, "with local changes")
			}
		}
	}
	parts = append(parts, bi.GoVersion)
	return "sluice " + v + " (" + strings.Join(parts, ", ") + ")"
}
