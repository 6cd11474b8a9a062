package bench

import (
	"os"
	"time"
)

// readCores samples the busy time of the sink's and the load's CPUs from
// /proc/stat, which is the whole machine's in every network namespace.
// ok is false when it cannot be read, or there are no CPUs to count.
func readCores(sink, load []int) (coreSample, bool) {
	if len(sink) == 0 {
		return coreSample{}, false
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return coreSample{}, false
	}
	st, err := parseProcStat(b)
	if err != nil {
		return coreSample{}, false
	}
	return sampleOf(st, time.Now(), sink, load), true
}
