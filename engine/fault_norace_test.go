//go:build !race

package engine_test

// raceBuild says whether the race detector is on (see fault_race_test.go).
const raceBuild = false
