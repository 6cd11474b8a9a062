package harness

import (
	"os"
	"time"
)

// ReadCores samples the busy time of the sink's and the load's CPUs from
// /proc/stat, which is the whole machine's in every network namespace.
// ok is false when it cannot be read, or there are no CPUs to count.
func ReadCores(sink, load []int) (CoreSample, bool) {
	if len(sink) == 0 {
		return CoreSample{}, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CoreSample{}, false
	}
	st, err := ParseProcStat(b)
	if err != nil {
		return CoreSample{}, false
	}
	return SampleOf(st, time.Now(), sink, load), true
}
