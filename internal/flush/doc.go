// Package flush orders the lanes of an event-loop runner by the deadline
// of the partly filled buffer each holds, so that a worker finds the next
// deadline in O(1) and lanes join, leave or move in O(log n). The uring and
// epoll runners share it.
package flush
