package main

import (
	"testing"

	"go.uber.org/goleak"
)

// gnet starts a goroutine pool of ants when its package is initialised,
// which lives as long as the process: not a leak of this sink's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"))
}
