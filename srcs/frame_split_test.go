package srcs

// splitRecords is the tests' reading of a framed stream, as a runner's lane
// reads it (internal/runner/driver) for framers that skip nothing: buf[:n] starts
// at a record boundary; it returns the bytes of the whole records at its
// start, or the error that ends the lane.
func splitRecords(f Framer, buf []byte, n int) (done int, err error) {
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
func recordFlags(done, n int) Flags {
	if n > done {
		return Records | Truncated
	}
	return Records
}
