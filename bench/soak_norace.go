//go:build !race

package bench

// raceDetector says whether this is a -race build (see soak_race.go).
const raceDetector = false
