// Package client is the thin Go client of ctxd: agents link it to open
// sessions on the daemon over its Unix socket (PROTOCOL.md) and drive
// EnsurePrefix → PrefillSuffix → Decode turn after turn.
//
// Invariants:
//   - Every blocking call takes a context.Context; cancelling it sends a
//     CANCEL frame, and a Decode stops within one token.
//   - A Client multiplexes calls over one connection and is safe for
//     concurrent use; a Session runs one call at a time (the server answers
//     ErrSessionBusy otherwise).
//   - Errors from the daemon match the sentinels below with errors.Is; a
//     broken connection fails every pending call with ErrClosed.
package client
