package report

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/google/pprof/profile"
)

// FuncCost is one function's flat CPU time in a profile.
type FuncCost struct {
	Function string  `json:"function"`
	FlatS    float64 `json:"flat_s"`
	FlatPct  float64 `json:"flat_pct"`
}

// TopFunctions reads a CPU profile and returns the n functions with the
// most flat time (samples whose leaf frame is the function), as
// `go tool pprof -top` would.
func TopFunctions(path string, n int) ([]FuncCost, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return nil, fmt.Errorf("bench: profile %s: %w", path, err)
	}
	return flatTop(p, n), nil
}

// flatTop sums each sample's CPU value under its leaf function.
func flatTop(p *profile.Profile, n int) []FuncCost {
	vi := len(p.SampleType) - 1 // "cpu" nanoseconds, after "samples"
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			vi = i
		}
	}
	if vi < 0 {
		return nil
	}
	flat := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		total += v
		name := "?"
		if len(s.Location) > 0 {
			if lines := s.Location[0].Line; len(lines) > 0 && lines[0].Function != nil {
				name = lines[0].Function.Name
			}
		}
		flat[name] += v
	}
	out := make([]FuncCost, 0, len(flat))
	for name, v := range flat {
		fc := FuncCost{Function: name, FlatS: time.Duration(v).Seconds()}
		if total > 0 {
			fc.FlatPct = 100 * float64(v) / float64(total)
		}
		out = append(out, fc)
	}
	slices.SortFunc(out, func(a, b FuncCost) int {
		return cmp.Or(cmp.Compare(b.FlatS, a.FlatS), cmp.Compare(a.Function, b.Function))
	})
	return out[:min(n, len(out))]
}

func WriteTop(w io.Writer, label, path string, top []FuncCost) {
	fmt.Fprintf(w, "\n%s: CPU profile %s, top %d by flat time:\n", label, path, len(top))
	for _, f := range top {
		fmt.Fprintf(w, "  %8.3fs %5.1f%%  %s\n", f.FlatS, f.FlatPct, f.Function)
	}
}
