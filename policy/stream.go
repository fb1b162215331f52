package policy

import "time"

// StreamCoalesce is the gap between a call's writes under which the daemon
// holds a streamed token's DATA frame so that it shares the next token's
// write (or the call's RESPONSE): a socket write wakes
// the client, and on a machine whose other cores are busy the kernel runs
// the woken client on the daemon's core (a write's wakeup is "sync": it
// tells the scheduler the writer is about to sleep), so each write stops
// the decode while the client reads. Tokens slower than this (every model
// past a toy, at tens of milliseconds each) go out one by one as before;
// faster ones leave in groups about this far apart, each token held at
// most one decode step, well under a frame of a terminal's refresh.
// Measured in docs/BENCHMARKS.md (issue 17).
const StreamCoalesce = 2 * time.Millisecond

// HoldFrame reports whether a streamed frame that is ready now waits for
// the next one: when the same call's previous write went out less than
// window ago. The first frame of a call (first) never waits, nor does
// any with a window of zero or less. A held frame leaves with the next
// frame written (the daemon also sends held frames before the call waits
// for another session's turn).
func HoldFrame(sinceLastWrite time.Duration, first bool, window time.Duration) bool {
	return !first && window > 0 && sinceLastWrite < window
}
