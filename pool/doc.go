// Package pool is the shared source buffer pool: one off-heap slab cut into
// fixed-size buffers, handed to sources under a fairness policy, and
// returned by consumers when they are done with the bytes.
//
// # Policy
//
// While buffers are free they go to whoever asks first. When they run out,
// sources that hold no buffer join a FIFO queue and every released buffer
// goes straight to the head of it. While any such source waits, no other
// source is granted a second buffer. Without contention a per-source cap
// still applies. A source that already holds buffers and asks for more while
// the pool is dry waits in a second queue that is served only when nobody
// with empty hands is waiting. A source its rate limit holds
// ([Account.SetRate]) gets no buffer and waits in neither queue until it has
// paid for what it read; then it takes a free buffer at once, or queues like
// any other when none is free. A hold is counted as a hold
// ([Stats].RateHeld, RateHolds), not as a wait for a buffer ([Stats].Waiters,
// Waits), which count contention only.
//
// # Acquiring
//
// [Account.TryAcquire] never blocks. [Account.Wait] registers an
// asynchronous waiter for event-loop runners: the pool reserves a buffer for
// the account and calls a notify function, and the runner collects the
// buffer with [Account.Claim]. [Account.Acquire] blocks, honouring a
// context, for the goroutine and thread runners.
//
// # Leases
//
// Each loan of a buffer is a lease, numbered by [Buf.Lease]. [Pool.Release]
// trusts its caller to hold the buffer and panics on a second release.
// [Pool.ReleaseLease] is for holders that give out copies of a lease (the
// engine's chunks are values): the first release under a lease frees the
// buffer, and any later one is a counted no-op
// ([Stats].StaleReleases), even once the buffer is lent to someone else.
//
// # Memory
//
// The slab is mapped off the Go heap and its pages become resident as
// buffers are first written, so an idle pool costs next to nothing;
// [Config].Prefault maps it populated instead. The pages of a buffer that
// stays free for [Config].ReturnAfter (a minute by default) go back to the
// kernel, so a pool that took a burst shrinks back to what its traffic
// keeps using. The runners read into the buffers without registering the
// slab as io_uring fixed buffers, which would pin, and so fault in, every
// page at once.
// [Pool.CloseWhenIdle] unmaps the slab when the last held buffer comes
// home, for owners that stop before their consumers are done.
//
// The engine creates one source pool for all its sources. Processing stages
// that need memory create their own pools, so nothing downstream ever waits
// on the source pool, and sources can never starve processing into a
// deadlock.
package pool
