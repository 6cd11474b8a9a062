package srcs

import "github.com/sluice-io/sluice/internal/contract"

// Flags describe a chunk (engine.Chunk.Flags). Its String method lists
// the flags set ("partial|records").
type Flags = contract.Flags

// The flags of a chunk. They are contract's, which the runners set; a test
// keeps the two lists equal.
const (
	// Partial marks a buffer emitted before it was full: the flush timeout
	// fired, the source stopped, or an error or end of stream followed.
	Partial Flags = 1 << iota
	// EndOfStream marks the empty chunk that follows a source's last data.
	EndOfStream
	// Datagrams marks a buffer that holds whole datagrams, each behind a
	// 4-byte little-endian length (see ForEachDatagram).
	Datagrams
	// Records marks a chunk of a framed source (see Framer): it starts at
	// a record boundary and holds whole records only, unless Truncated is
	// set too.
	Records
	// Truncated marks the last chunk of a framed source's session that
	// ended inside a record: the bytes after its last whole record are the
	// start of a record the source never finished.
	Truncated
)
