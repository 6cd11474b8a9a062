//go:build race

package engine_test

// raceBuild says whether the race detector is on. Its own memory, which
// grows with what the tests before have done and is never handed back,
// makes the resident set size meaningless for bounding the engine's.
const raceBuild = true
