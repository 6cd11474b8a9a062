package srcs

import "github.com/sluice-io/sluice/internal/contract"

// Flags describe a chunk (engine.Chunk.Flags). Its String method lists
// the flags set ("partial|records").
type Flags = contract.Flags

const (
	// Partial marks a buffer emitted before it was full: the flush timeout
	// fired, the source stopped, or an error or end of stream followed.
	Partial = contract.Partial
	// EndOfStream marks the empty chunk that follows a source's last data.
	EndOfStream = contract.EndOfStream
	// Datagrams marks a buffer that holds whole datagrams, each behind a
	// 4-byte little-endian length (see ForEachDatagram).
	Datagrams = contract.Datagrams
	// Records marks a chunk of a framed source (see Framer): it starts at
	// a record boundary and holds whole records only, unless Truncated is
	// set too.
	Records = contract.Records
	// Truncated marks the last chunk of a framed source's session that
	// ended inside a record: the bytes after its last whole record are the
	// start of a record the source never finished.
	Truncated = contract.Truncated
)
