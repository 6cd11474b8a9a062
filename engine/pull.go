package engine

import (
	"context"
	"errors"
	"iter"
	"time"
)

// take pops the next chunk of q for a consumer, handing error events to
// the error handler on the way. ok is false when q is empty.
func (e *Engine) take(q *queue) (c Chunk, ok, done bool) {
	for {
		it, ok, done := q.pop()
		if !ok {
			return Chunk{}, false, done
		}
		if it.err != nil {
			e.reportError(it.err)
			continue
		}
		if it.chunk.data() {
			e.flow.add(-1)
			e.totals.took(&it.chunk, time.Now())
		}
		return it.chunk, true, false
	}
}

// serve runs the push handler over one shard until it is closed and empty.
func (e *Engine) serve(q *queue) {
	for {
		c, ok, done := e.take(q)
		if ok {
			e.handler(c)
			continue
		}
		if done {
			return
		}
		select {
		case <-q.ready:
		case <-q.done:
		}
	}
}

// Next returns the next chunk in pull mode, blocking until one arrives, ctx
// ends, or the engine has shut down and every chunk was taken (ErrClosed).
// End-of-stream chunks are returned too, with no data. The caller must
// Release every chunk. Shutdown does not wait for a caller of Next: after
// it, Next goes on returning the chunks read before it, in order, and
// returns ErrClosed only after the last of them, so nothing read is lost.
// Chunks is the loop that does this and releases every chunk, and drains
// the engine when its context ends, where Next returns ctx's error. Next
// is safe for concurrent use; chunks of one source come out in order.
func (e *Engine) Next(ctx context.Context) (Chunk, error) {
	if e.handler != nil {
		return Chunk{}, errors.New("engine: Next: the engine delivers to a handler (WithHandler or WithInlineHandler)")
	}
	q := e.shards[0]
	for {
		c, ok, done := e.take(q)
		if ok {
			return c, nil
		}
		if done {
			return Chunk{}, ErrClosed
		}
		select {
		case <-q.ready:
		case <-q.done:
		case <-ctx.Done():
			return Chunk{}, ctx.Err()
		}
	}
}

// Chunks returns the pull-mode loop over the engine's chunks, for range:
//
//	for c, err := range e.Chunks(ctx) {
//		if err != nil {
//			return err // ctx ended
//		}
//		process(c.Data)
//	}
//
// It yields what Next returns, and releases each chunk when the loop body
// is done with it, so the body must not keep the chunk or its Data (a
// Release in the body is harmless). The loop ends by itself once the
// engine has shut down and every chunk read before has been yielded,
// whichever goroutine called Shutdown, before or during the loop.
//
// When ctx ends, the loop shuts the engine down and drains it, as
// http.Server's Shutdown drains its connections: the sources stop, and
// the loop goes on yielding what they read and every source's
// end-of-stream chunk, then ends. So the context of signal.NotifyContext
// stops a program cleanly on SIGINT; Shutdown, called after the loop,
// returns the shutdown's result. An error (the engine delivers to a
// handler) is yielded once, with no chunk, and ends the loop. Several
// goroutines may range over Chunks at once; each chunk reaches one of
// them, and Shutdown waits for every such loop to take what is queued.
func (e *Engine) Chunks(ctx context.Context) iter.Seq2[Chunk, error] {
	return func(yield func(Chunk, error) bool) { e.chunksLoop(ctx, yield) }
}

// chunksLoop is the loop Chunks returns. A goroutine with it on its
// stack is running a loop body (loopFuncs).
func (e *Engine) chunksLoop(ctx context.Context, yield func(Chunk, error) bool) {
	e.readers.add(1)
	defer e.readers.add(-1)
	for {
		c, err := e.Next(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return
		case err != nil && ctx.Err() != nil && e.handler == nil:
			// ctx ended: drain, as http.Server's Shutdown does. The
			// sources stop and the loop goes on with what they read,
			// their ends included, until the last.
			e.beginShutdown(context.Background())
			ctx = context.Background()
			continue
		case err != nil:
			yield(Chunk{}, err)
			return
		}
		if !yieldChunk(yield, c) {
			return
		}
	}
}

// yieldChunk hands c to the loop body and releases it when the body
// returns, or panics.
func yieldChunk(yield func(Chunk, error) bool, c Chunk) bool {
	defer c.Release()
	return yield(c, nil)
}
