package run

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench/harness"
)

// TestOpenWireFallback checks what each --wire asks for where no veth wire
// can be built (here: no CPUs of the sides' own): auto falls back to
// loopback and says why once, veth fails, loopback says nothing.
func TestOpenWireFallback(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		wantErr  bool
		wantNote bool
	}{
		{harness.WireAuto, false, true},
		{harness.WireVeth, true, false},
		{harness.WireLoopback, false, false},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var errOut bytes.Buffer
			env, why, closeWire, err := harness.OpenWire(context.Background(), tc.mode, nil, nil, &errOut)
			if tc.wantErr {
				if !errors.Is(err, harness.ErrWireUnavailable) {
					t.Fatalf("err %v, want ErrWireUnavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer closeWire()
			if env.Veth() || env.ListenAddr() != "127.0.0.1:0" || env.Name() != harness.WireLoopback {
				t.Errorf("env %+v, want loopback", env)
			}
			if got := strings.Count(errOut.String(), "\n"); (got == 1) != tc.wantNote || (why != "") != tc.wantNote {
				t.Errorf("stderr %q, reason %q; want a note: %v", errOut.String(), why, tc.wantNote)
			}
			if wi := env.Info(tc.mode, why); wi.Mode != harness.WireLoopback || wi.Asked != tc.mode || wi.SinkNS != "" {
				t.Errorf("info %+v", wi)
			}
		})
	}
}

func TestRunConfigWire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*RunConfig)
		wantErr string
	}{
		{"default auto", func(*RunConfig) {}, ""},
		{"loopback", func(c *RunConfig) { c.Wire = harness.WireLoopback }, ""},
		{"unknown", func(c *RunConfig) { c.Wire = "ethernet" }, "--wire"},
		{"veth in process", func(c *RunConfig) { c.Wire, c.InProcess = harness.WireVeth, true }, "--in-process"},
		{"veth unpinned", func(c *RunConfig) { c.Wire, c.Pin = harness.WireVeth, false }, "--pin"},
		{"auto in process", func(c *RunConfig) { c.InProcess = true }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultRunConfig()
			if c.Wire != harness.WireAuto {
				t.Fatalf("default --wire %q, want auto", c.Wire)
			}
			tc.edit(&c)
			err := c.Validate()
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Validate: %v, want an error naming %q", err, tc.wantErr)
			}
		})
	}
}

// TestWireCommand checks that a command on the veth wire enters its side's
// namespace through ip netns exec, and runs as it is on loopback.
func TestWireCommand(t *testing.T) {
	ctx := context.Background()
	lo := harness.WireEnv{}
	if got := lo.Command(ctx, harness.SideSink, "/bin/x", "a").Args; strings.Join(got, " ") != "/bin/x a" {
		t.Errorf("loopback: %v", got)
	}
	v := harness.WireEnv{Mode: harness.WireVeth, IP: "/sbin/ip", SinkNS: "s", LoadNS: "l"}
	for side, want := range map[string]string{harness.SideSink: "/sbin/ip netns exec s /bin/x a", harness.SideLoad: "/sbin/ip netns exec l /bin/x a"} {
		if got := v.Command(ctx, side, "/bin/x", "a").Args; strings.Join(got, " ") != want {
			t.Errorf("%s: %v, want %s", side, got, want)
		}
	}
	if v.ListenAddr() != harness.WireSinkIP+":0" {
		t.Errorf("listen %s", v.ListenAddr())
	}
}
