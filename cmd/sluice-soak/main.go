// Command sluice-soak runs sluice's reliability test: every kind of source
// on one engine for --duration, then exact delivery and no leaks (package
// internal/app/soak; docs/reliability.md). It is a thin driver.
//
// Exit statuses: 0 passed; 1 a mismatch, a leak or an error; 2 bad
// command line.
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

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/internal/app/soak"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	c := soak.DefaultConfig()
	fs := flag.NewFlagSet("sluice-soak", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Fprint(os.Stdout, "usage: sluice-soak [flags]\n\nflags:\n")
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(os.Stderr, "sluice-soak: %v\n(see sluice-soak --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "sluice-soak: unexpected argument %q (flags only)\n", fs.Arg(0))
		return 2
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-soak: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := soak.Run(ctx, c, harness.StdIO()); err != nil {
		fmt.Fprintf(os.Stderr, "sluice-soak: %v\n", err)
		return 1
	}
	return 0
}
