package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// Size is a byte count that parses and prints the way people write sizes:
// "64KiB", "16 KiB", "1MB", "4096". It implements flag.Value.
type Size int64

// ParseSize parses a byte count: a number with an optional SI or IEC unit.
func ParseSize(s string) (Size, error) {
	v, err := humanize.ParseBytes(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("bad size %q (want e.g. 4096, 64KiB, 1MiB)", s)
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(v), nil
}

func (s *Size) String() string {
	if s == nil || *s == 0 {
		return "0"
	}
	return strings.ReplaceAll(humanize.IBytes(uint64(*s)), " ", "")
}

// Set implements flag.Value.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = n
	return nil
}

// Rate is a data rate in bytes per second: "10MiB/s", "1MB", "500000".
// Zero means unlimited. It implements flag.Value.
type Rate float64

// ParseRate parses a rate; the "/s" suffix is optional.
func ParseRate(s string) (Rate, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "/s"), "ps")
	if t == "" || t == "0" || t == "unlimited" {
		return 0, nil
	}
	v, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, fmt.Errorf("bad rate %q (want e.g. 1MiB/s, 500KB/s, 0 for unlimited)", s)
	}
	return Rate(v), nil
}

func (r *Rate) String() string {
	if r == nil || *r == 0 {
		return "0"
	}
	return FormatRate(float64(*r))
}

// Set implements flag.Value.
func (r *Rate) Set(v string) error {
	n, err := ParseRate(v)
	if err != nil {
		return err
	}
	*r = n
	return nil
}

// FormatRate renders bytes per second as "1.2 GiB/s".
func FormatRate(bps float64) string {
	if bps <= 0 || math.IsNaN(bps) || math.IsInf(bps, 0) {
		return "0 B/s"
	}
	return humanize.IBytes(uint64(bps)) + "/s"
}

// FormatBytes renders a byte count as "1.2 GiB".
func FormatBytes(n uint64) string { return humanize.IBytes(n) }

// FormatNanos renders a latency with three significant digits: "812µs".
func FormatNanos(ns int64) string {
	d := time.Duration(ns)
	switch {
	case d <= 0:
		return "0"
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		return d.Round(10 * time.Nanosecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// FormatRatio renders a/b as "1.30x", or "-" when undefined.
func FormatRatio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}

// StringList is a comma-separated list flag: "uring,epoll".
type StringList []string

func (l *StringList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, ",")
}

// Set implements flag.Value.
func (l *StringList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			*l = append(*l, f)
		}
	}
	return nil
}

// RateList is a comma-separated list of rates: "10MiB/s,50MiB/s".
type RateList []Rate

func (l *RateList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, r := range *l {
		parts[i] = strings.ReplaceAll(r.String(), " ", "")
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value.
func (l *RateList) Set(v string) error {
	*l = nil
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := ParseRate(f)
		if err != nil {
			return err
		}
		if r <= 0 {
			return fmt.Errorf("load %q must be positive", f)
		}
		*l = append(*l, r)
	}
	return nil
}
