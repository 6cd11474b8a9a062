package bench

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"

	"github.com/sluice-io/sluice/bench/harness"

	"github.com/sluice-io/sluice/engine/node"
)

// NodeFlags are the `sink` flags that turn it into a long-running ingest
// node driven by a YAML file: the node of package engine/node, which the
// `sluice` command runs too (`sluice run -c FILE`).
type NodeFlags struct {
	Config  string // the node's YAML file; empty: the plain benchmark sink
	Metrics string // serve /metrics on this address
	Pprof   bool   // also serve /debug/pprof/ on the metrics address
}

func (f *NodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.Config, "config", f.Config, "run as an ingest node configured by the YAML `FILE` (see examples/node.yaml; `sluice run -c FILE` does the same); other flags but --metrics and --pprof are ignored")
	fs.StringVar(&f.Metrics, "metrics", f.Metrics, "with --config: serve Prometheus metrics at http://`ADDR`/metrics")
	fs.BoolVar(&f.Pprof, "pprof", f.Pprof, "with --metrics: also serve /debug/pprof/ there")
}

func (f NodeFlags) validate() error {
	switch {
	case f.Metrics != "" && f.Config == "":
		return errors.New("--metrics: needs --config")
	case f.Pprof && f.Metrics == "":
		return errors.New("--pprof: needs --metrics")
	}
	return nil
}

// RunNode runs the ingest node of fl.Config (node.Load, node.New,
// Node.Run) until ctx ends or SIGINT or SIGTERM arrives, then drains; see
// node.Node.Run for the signals. Its log goes to ios.Err, the stdout
// output to ios.Out.
func RunNode(ctx context.Context, fl NodeFlags, ios harness.IO) (*node.Report, error) {
	cfg, err := node.Load(fl.Config)
	if err != nil {
		return nil, err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, node.Signals()...)
	defer signal.Stop(sigs)
	n, err := node.New(cfg, node.WithConfigPath(fl.Config), node.WithMetrics(fl.Metrics, fl.Pprof),
		node.WithLogOutput(ios.Err), node.WithStdout(ios.Out))
	if err != nil {
		return nil, err
	}
	return n.Run(ctx, sigs)
}
