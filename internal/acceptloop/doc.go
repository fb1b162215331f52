// Package acceptloop keeps an accept loop alive through the errors that
// pass: a process or system out of file descriptors (EMFILE, ENFILE), out
// of buffers or memory, a connection aborted before it was accepted. The
// loop backs off as net/http's does (5 ms doubling to 1 s), logs once per
// episode and never exits for them; every other error ends the loop.
//
// Invariants:
//   - Temporary is true only for errors that end by themselves.
//   - Backoff.Wait sleeps at most one second and returns early, false,
//     when done closes.
package acceptloop
