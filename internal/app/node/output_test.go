package node

import (
	"net"
	"regexp"
	"strings"
	"testing"
)

// TestRecordsLinesStayWhole: in the records format a record one source
// cut short by closing is written on a line of its own behind the
// truncated marker, and the next source's record starts a line of its
// own; a line an unframed source sends in two writes, with another
// source's line between them, comes out whole.
func TestRecordsLinesStayWhole(t *testing.T) {
	for _, tc := range []struct {
		name, framing string
		// a sends first, then b sends all of its bytes and closes, then
		// a sends aLast and closes.
		aFirst, b, aLast string
		want             string // the output, with N for source ids and A for a's name
	}{
		{"unframed, cut by close", "", "aaa\nbb", "ccc\n", "b\ndd",
			"aaa\nccc\nbbb\nsluice-truncated source=N bytes=2 name=\"A\"\ndd\n"},
		{"newline framing, cut by close", "    framing: newline\n", "aaa\nbb", "ccc\n", "b\ndd",
			"aaa\nccc\nbbb\nsluice-truncated source=N bytes=2 name=\"A\"\ndd\n"},
		{"unframed, several lines in one write", "", "1\n2\n3", "x\ny\n", "3\n",
			"1\n2\nx\ny\n33\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"+tc.framing+"output:\n  stdout: {}\n")
			a, err := net.Dial("tcp", tn.addr("tcp"))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.Write([]byte(tc.aFirst))
			firstLines := tc.aFirst[:strings.LastIndexByte(tc.aFirst, '\n')+1]
			until(t, "a's whole lines", func() bool { return tn.stdout.String() == firstLines })
			// Framed, the cut record waits in the engine; unframed, in the
			// output. Either way b's lines must not join it.
			b, err := net.Dial("tcp", tn.addr("tcp"))
			if err != nil {
				t.Fatal(err)
			}
			b.Write([]byte(tc.b))
			b.Close()
			until(t, "b's lines", func() bool { return tn.stdout.String() == firstLines+tc.b })
			a.Write([]byte(tc.aLast))
			a.Close()
			until(t, "a's end", func() bool { return strings.Count(tn.stdout.String(), "\n") == strings.Count(tc.want, "\n") })
			if _, err := tn.stop(); err != nil {
				t.Fatal(err)
			}
			got := regexp.MustCompile(`source=\d+`).ReplaceAllString(tn.stdout.String(), "source=N")
			got = strings.ReplaceAll(got, `name="tcp://`+a.LocalAddr().String()+`"`, `name="A"`)
			if got != tc.want {
				t.Fatalf("output\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

// TestRecordsDrainCutsALine: a line a connection has begun when the
// drain stops it is written, marked, on a line of its own, framed or not.
func TestRecordsDrainCutsALine(t *testing.T) {
	for _, framing := range []string{"", "    framing: newline\n"} {
		t.Run("framing "+strings.TrimSpace(strings.TrimPrefix(framing, "    framing:")), func(t *testing.T) {
			tn := startNode(t, "sources:\n  - tcp: {listen: 127.0.0.1:0}\n"+framing+"engine: {flush: 1ms}\noutput:\n  stdout: {}\n")
			c, err := net.Dial("tcp", tn.addr("tcp"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// One small write is one read: once its whole line is out, the
			// rest has been read too (held by the output, or by the engine
			// for a framed source).
			c.Write([]byte("whole\ncut sh"))
			until(t, "the whole line", func() bool { return tn.stdout.String() == "whole\n" })
			if _, err := tn.stop(); err != nil {
				t.Fatal(err)
			}
			want := regexp.MustCompile(`^whole\nsluice-truncated source=\d+ bytes=6 name="tcp://127\.0\.0\.1:\d+"\ncut sh\n$`)
			if got := tn.stdout.String(); !want.MatchString(got) {
				t.Fatalf("output %q", got)
			}
		})
	}
}
