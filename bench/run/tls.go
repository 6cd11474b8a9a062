package run

// TLS ingestion beside plaintext (run --tls).
//
// The kernels sluice targets have no kTLS, so every TLS source is read by
// the goroutine runner through crypto/tls, whatever the engine's runner
// (see engine.Config.Runner). run --tls therefore adds one row, RowTLS: an
// engine on the goroutine runner behind a TLS listener, the listener
// configured as a node file would configure it (srcs.TLSConfig), fed by
// the same generator over TLS. The row goes first, so that the ratios the
// report prints, the first row's to each other one, are TLS's cost against
// each plaintext runner measured in the same rounds: against the goroutine
// runner, the same read path without the decryption, and against the
// others, what moving a source to TLS costs.
//
// The certificate authority and the server's certificate are made when
// the run starts, into a temporary directory removed at its end. The
// generator dials every connection and finishes its handshake before the
// measured interval begins, and then writes through crypto/tls with one
// goroutine per connection (tls.Conn needs the Go netpoller's blocking
// writes, not the shards' non-blocking ones), as fast as the connection
// takes it: --tls is for unpaced runs.

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/sluice-io/sluice/bench"
	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
	"github.com/sluice-io/sluice/bench/peers"
	"github.com/sluice-io/sluice/engine"
)

// RowTLS is the row of run --tls: the goroutine runner, which carries every
// TLS source, behind a TLS listener.
const RowTLS = engine.RunnerGoroutine + "+tls"

// tlsNote is the report's note on a run with --tls.
const tlsNote = "tls: the " + RowTLS + " row is the goroutine runner (which reads every TLS source: there is no kTLS) behind a TLS listener " +
	"with a certificate made for the run; the generator dials and finishes every handshake before the interval, then writes through " +
	"crypto/tls, one goroutine per connection; the ratios are that row's to each plaintext row of the same rounds"

// goTLSNote is the report's note on a run with --tls --peers go.
const goTLSNote = "tls: the " + peers.GoTLS + " row is the go row's sink (Go's net package, a goroutine per connection) behind a crypto/tls " +
	"listener with the same certificate, fed by the same generator; " + peers.GoTLS + "/" + peers.Go + " is what TLS costs a sink written with Go alone"

// startTLSRun makes the run's certificates when c asks for TLS, and
// returns them with a function that removes them.
func startTLSRun(c RunConfig) (*harness.TLSFiles, func(), error) {
	if !c.TLS {
		return nil, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "sluice-bench-tls-")
	if err != nil {
		return nil, nil, fmt.Errorf("bench: --tls: %w", err)
	}
	f, err := harness.MakeTLSFiles(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("bench: --tls: certificates: %w", err)
	}
	return f, func() { os.RemoveAll(dir) }, nil
}

// validateTLS checks what run --tls can do, naming the flag at fault.
func (c RunConfig) validateTLS() error {
	if !c.TLS {
		return nil
	}
	switch {
	case c.Client != load.ClientGen:
		return errors.New("--tls: with the built-in generator only (--client gen)")
	case c.Rate > 0:
		return errors.New("--tls: unpaced runs only (no --rate): the generator writes TLS with blocking writes, as fast as each connection takes them")
	case slices.Contains(c.Peers, peers.Gnet):
		return errors.New("--tls: not with --peers gnet (the gnet sink reads plaintext; --peers go adds a go+tls row)")
	}
	return nil
}

// tlsNotes are the report's notes on a run with --tls: what the TLS row
// is, and the sessions' version and cipher suite.
func (c RunConfig) tlsNotes(runs []*bench.Result) []string {
	if !c.TLS {
		return nil
	}
	notes := []string{tlsNote}
	if slices.Contains(c.Peers, peers.Go) {
		notes = append(notes, goTLSNote)
	}
	for _, r := range runs {
		if r.TLS != "" {
			notes = append(notes, "tls: sessions of "+r.Runner+": "+r.TLS)
			break
		}
	}
	return notes
}

// tlsRows puts RowTLS first when c asks for TLS, and peers.GoTLS second
// when c also asks for peers.Go.
func (c RunConfig) tlsRows(rows []string) []string {
	if !c.TLS {
		return rows
	}
	first := []string{RowTLS}
	if slices.Contains(rows, peers.Go) {
		first = append(first, peers.GoTLS)
	}
	return append(first, rows...)
}

// tlsWorkload makes w the TLS row's when name is RowTLS: the goroutine
// runner behind a TLS listener with the run's certificate; and for
// peers.GoTLS, Go's sink behind one.
func tlsWorkload(w bench.Workload, name string, files *harness.TLSFiles) bench.Workload {
	switch name {
	case RowTLS:
		w.Runner, w.TLS = engine.RunnerGoroutine, files
		w.Engine.TLS = files.Listener()
	case peers.GoTLS:
		w.Runner, w.TLS = peers.Go, files
	}
	return w
}
