package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/testkit/exampletest"
)

// maxWeight is the most a plain TCP listener on sluice may weigh against
// the same program on Go's net package: a program pays for the sources
// and the features it uses, and for the engine, not for the rest.
const maxWeight = 1.5

// TestWeight builds linecount and its twin on Go's net package
// (testdata/netlinecount: the same flag, output and drain on SIGINT, a
// goroutine per connection counting lines through bufio), the same way,
// and fails when linecount weighs more than maxWeight times the twin.
// Both are weighed as go build leaves them, with their debug information,
// and stripped (-ldflags=-s -w), as a container image often ships them:
// the debug information grows with the code, so the two ratios differ a
// little, and a program pays in both.
func TestWeight(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"as built", nil},
		{"stripped", []string{"-ldflags=-s -w"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			lc := fileSize(t, exampletest.BuildPackage(t, ".", c.flags...))
			twin := fileSize(t, exampletest.BuildPackage(t, "./testdata/netlinecount", c.flags...))
			ratio := float64(lc) / float64(twin)
			t.Logf("%s: linecount %d bytes, netlinecount %d bytes: %.2fx", c.name, lc, twin, ratio)
			if ratio > maxWeight {
				t.Errorf("%s, linecount is %d bytes, %.2fx its twin on net (%d bytes), above %.1fx: "+
					"find what it links and does not use (go version -m, go list -deps, "+
					"go tool nm -size -sort size) and move it behind the package that needs it. "+
					"Go 1.26 on linux/amd64 built them at 5,006,714 against 3,520,767 bytes (1.42x), "+
					"stripped 3,338,505 against 2,363,657 (1.41x), where they had been 9,828,127 (2.79x) "+
					"and 6,750,473 (2.86x) while srcs held MQTT, TLS and the PROXY parser and "+
					"sluice logged through *slog.Logger",
					c.name, lc, ratio, twin, maxWeight)
			}
		})
	}
}

// TestLinks checks by name what a plain TCP listener must not link: each
// comes with a source or a feature linecount does not use, or with a
// logger it does not give.
func TestLinks(t *testing.T) {
	out, err := exec.Command(exampletest.GoTool(), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range []struct{ pkg, why string }{
		{"github.com/sluice-io/sluice/srcs/mqtt", "the MQTT source"},
		{"github.com/mochi-mqtt/server/v2/packets", "the MQTT source's packet code (srcs/mqtt)"},
		{"github.com/sluice-io/sluice/srcs/trust", "TLS and the PROXY protocol"},
		{"crypto/tls", "TLS (srcs/trust)"},
		{"github.com/pires/go-proxyproto", "the PROXY protocol's parser (srcs/trust)"},
		{"github.com/dustin/go-humanize", "the node file's sizes (internal/app/node)"},
		{"log/slog", "a logger given to the engine or a source (srcs.Logger)"},
		{"github.com/prometheus/client_golang/prometheus", "metrics (engine/metrics)"},
		{"gopkg.in/yaml.v3", "the node file (internal/app/node)"},
	} {
		if slices.Contains(deps, p.pkg) {
			t.Errorf("linecount links %s, which it does not use: it belongs with %s", p.pkg, p.why)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
