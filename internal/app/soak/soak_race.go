//go:build race

package soak

// raceDetector says whether this is a -race build, whose detector keeps
// shadow memory and per-goroutine history that the soak's resident-set
// check would count as a leak.
const raceDetector = true
