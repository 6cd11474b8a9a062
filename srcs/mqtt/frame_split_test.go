package mqtt

import "github.com/sluice-io/sluice/srcs"

// splitRecords is what a lane does after a read into buf of n bytes: it
// returns how many bytes are whole records.
func splitRecords(f srcs.Framer, buf []byte, n int) (done int, err error) {
	for done < n {
		k, err := f.Next(buf[done:n], 0, len(buf))
		if err != nil || k == 0 {
			return done, err
		}
		done += k
	}
	return done, nil
}

// recordFlags is what a lane emits for n bytes of which done are whole
// records.
func recordFlags(done, n int) srcs.Flags {
	if n > done {
		return srcs.Records | srcs.Truncated
	}
	return srcs.Records
}
