package harness

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/sluice-io/sluice/bench/report"
)

// IO is where a command writes: results to Out, progress and diagnostics
// to Err. ErrIsTTY selects the one-line progress bar over periodic lines.
type IO struct {
	Out      io.Writer
	Err      io.Writer
	ErrIsTTY bool
}

// StdIO returns the process's standard output and error.
func StdIO() IO {
	tty := false
	if fi, err := os.Stderr.Stat(); err == nil {
		tty = fi.Mode()&os.ModeCharDevice != 0
	}
	return IO{Out: os.Stdout, Err: os.Stderr, ErrIsTTY: tty}
}

// progressMin is the shortest expected run that gets progress reports.
const progressMin = 2 * time.Second

// progress reports a measurement's advance on stderr: a bar redrawn in
// place on a terminal, otherwise a line every few seconds.
type progress struct {
	stop chan struct{}
	done chan struct{}
}

// StartProgress reports until finish is called. total is the expected
// length (zero: open-ended); bytes returns the bytes so far, and records,
// when not nil, the records so far.
func StartProgress(ios IO, label string, total time.Duration, bytes, records func() uint64) *progress {
	p := &progress{stop: make(chan struct{}), done: make(chan struct{})}
	if ios.Err == nil || (total > 0 && total < progressMin) {
		close(p.done)
		return p
	}
	period := 5 * time.Second
	if ios.ErrIsTTY {
		period = 250 * time.Millisecond
	}
	go func() {
		defer close(p.done)
		start := time.Now()
		t := time.NewTicker(period)
		defer t.Stop()
		var lastB, lastR uint64
		lastT := start
		for {
			select {
			case <-p.stop:
				if ios.ErrIsTTY {
					fmt.Fprint(ios.Err, "\r\033[K")
				}
				return
			case now := <-t.C:
				b := bytes()
				secs := now.Sub(lastT).Seconds()
				rate := float64(b-lastB) / secs
				recs := ""
				if records != nil {
					r := records()
					recs = fmt.Sprintf(", %s records/s", humanize.Comma(int64(float64(r-lastR)/secs)))
					lastR = r
				}
				lastB, lastT = b, now
				el := now.Sub(start)
				if ios.ErrIsTTY {
					fmt.Fprintf(ios.Err, "\r\033[K%s %s %s  %s  %s%s", label, bar(el, total, 24),
						el.Round(100*time.Millisecond), report.FormatBytes(b), report.FormatRate(rate), recs)
				} else {
					fmt.Fprintf(ios.Err, "%s: %s elapsed, %s, %s%s\n", label, el.Round(time.Second), report.FormatBytes(b), report.FormatRate(rate), recs)
				}
			}
		}
	}()
	return p
}

// bar draws [=====>    ] for el out of total.
func bar(el, total time.Duration, width int) string {
	if total <= 0 {
		return ""
	}
	n := min(int(float64(width)*el.Seconds()/total.Seconds()), width)
	s := strings.Repeat("=", n)
	if n < width {
		s += ">" + strings.Repeat(" ", width-n-1)
	}
	return "[" + s + "]"
}

func (p *progress) Finish() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.stop)
	<-p.done
}
