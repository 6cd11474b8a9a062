package srcs

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the units parseSize takes, lower-cased: SI ones are
// powers of 1000, IEC ones of 1024, as people write them (64KB, 64KiB).
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1e3, "kb": 1e3, "ki": 1 << 10, "kib": 1 << 10,
	"m": 1e6, "mb": 1e6, "mi": 1 << 20, "mib": 1 << 20,
	"g": 1e9, "gb": 1e9, "gi": 1 << 30, "gib": 1 << 30,
	"t": 1e12, "tb": 1e12, "ti": 1 << 40, "tib": 1 << 40,
}

var errSize = errors.New("not a size")

// parseSize reads a size such as 4096, 64KiB, 1 MiB or 1.5KB as a whole
// number of bytes (rounded down). It takes what the node file's sizes
// take, without a library whose regular expressions and big numbers
// every program that frames a stream would link.
func parseSize(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, errSize
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if err != nil || !ok {
		return 0, errSize
	}
	b := v * mult
	if b >= math.MaxUint64 {
		return 0, errSize
	}
	return uint64(b), nil
}
