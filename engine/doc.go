// Package engine ties sluice together: configuration, runner selection at
// start-up, source lifecycle, delivery of chunks to processing, backpressure,
// errors and statistics. It is the only package that knows several runners
// exist.
//
// # Delivery and ownership
//
// Every chunk is a view of a pool buffer, lent to the consumer until it is
// released. Pull them with [Engine.Chunks], which releases each chunk when
// the loop body is done with it, or with [Engine.Next]; or have them pushed
// to a handler ([WithHandler], [WithInlineHandler]). A [Chunk] is a value:
// Release may be called on any copy, and only the first call counts.
//
// # Shutting down
//
// [Engine.Shutdown] stops every source and waits until what they read is
// queued. With a handler it then waits for every chunk to be released. In
// pull mode it waits for the loops over [Engine.Chunks] in progress to
// take what is queued, but never for a caller of Next: Chunks and Next go
// on returning the queued chunks until the last, so a program may stop
// reading and shut down without hanging and without losing what was read;
// what it has not taken stays queued, its buffers mapped, until it does,
// and Shutdown says so ([ErrUnread]). A loop over Chunks whose context
// ends drains the engine, as http.Server's Shutdown drains its
// connections: the sources stop, and the loop yields what they read and
// their ends, then ends.
//
// # Failing loudly
//
// A misconfiguration is refused where it is made: by New, AddSource or
// AddListener. Whatever stops a source or leaves data unread reaches the
// [ErrorHandler], or without one Shutdown's result: source errors, a
// listener that stops, a source stalled because its chunks are not
// released ([ErrStalled]), chunks left queued at Shutdown ([ErrUnread]).
//
// # Errors and ends
//
// Source errors reach the [ErrorHandler] behind the data read before them.
// A clean end of stream is not an error: it is the chunk flagged
// srcs.EndOfStream. [Engine.AddSource] returns the open error of a source
// that cannot reconnect; the failures of a reconnecting client arrive
// later, at the error handler, and are retried. [WithSessionEnds] marks
// each of a reconnecting client's sessions with a chunk of its own.
package engine
