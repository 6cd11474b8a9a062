//go:build !race

package soak

// raceDetector says whether this is a -race build (see soak_race.go).
const raceDetector = false
