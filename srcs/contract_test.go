package srcs_test

import (
	"testing"

	"github.com/sluice-io/sluice/internal/contract"
	"github.com/sluice-io/sluice/srcs"
)

// A user's source or framer is the runner contract's: the interfaces have
// the same method sets.
var (
	_ contract.Source = srcs.Source(nil)
	_ srcs.Source     = contract.Source(nil)
	_ contract.Framer = srcs.Framer(nil)
	_ srcs.Framer     = contract.Framer(nil)
)

// TestFlagsAreContracts: the flags a program tests are the bits the
// runners set.
func TestFlagsAreContracts(t *testing.T) {
	for _, f := range []struct {
		name       string
		user, runs srcs.Flags
	}{
		{"Partial", srcs.Partial, contract.Partial},
		{"EndOfStream", srcs.EndOfStream, contract.EndOfStream},
		{"Datagrams", srcs.Datagrams, contract.Datagrams},
		{"Records", srcs.Records, contract.Records},
		{"Truncated", srcs.Truncated, contract.Truncated},
	} {
		if f.user != f.runs {
			t.Errorf("srcs.%s = %v, contract.%[1]s = %v", f.name, f.user, f.runs)
		}
	}
	if all := srcs.Partial | srcs.EndOfStream | srcs.Datagrams | srcs.Records | srcs.Truncated; all.String() != "partial|eos|datagrams|records|truncated" {
		t.Errorf("every flag prints as %q", all)
	}
}
