package arrivals

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/bench/harness"
	"github.com/sluice-io/sluice/bench/load"
)

func TestArrivalsPlots(t *testing.T) {
	dir := t.TempDir()
	ios := harness.IO{Out: io.Discard, Err: io.Discard}
	arep := &ArrivalsReport{Poisson: poissonReference(1000, 64<<10, 1024),
		Clients: []ArrivalStats{{Client: load.ClientFio, Sink: SinkProbe, MergedCDF: expQuantiles(4e3), ConnCDF: expQuantiles(2e8)}}}
	if err := writeArrivalsPlots(dir, arep, ios); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "arrivals-merged.svg")); err != nil || !strings.Contains(string(b), "fio into probe") {
		t.Errorf("arrivals-merged.svg: %v, or no fio line", err)
	}
}
