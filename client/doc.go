// Package client is the thin Go client of ctxd: agents link it to open
// sessions on the daemon over its Unix socket (PROTOCOL.md) and drive
// EnsurePrefix → PrefillSuffix → Decode turn after turn.
//
// A turn: Dial, OpenSession (or OpenSessionWith to ensure the first
// prefix in the same round trip, or OpenSessionOptions), then per turn
// Session.EnsurePrefix with a Manifest whose stable segments come first,
// Session.PrefillSuffix for the volatile rest, Session.Decode streaming
// Tokens until a StopReason; Session.Explain says what the session holds;
// Session.Close frees it. See the examples.
//
// Invariants:
//   - The client speaks its own types: no exported identifier mentions a
//     type of package policy or of the protobuf package protocol/ctxdpb
//     (TestExportedAPIHasNoPolicyOrProtobufTypes enforces it). The client
//     converts to and from them inside, so an agent links client alone.
//   - Every blocking call takes a context.Context; cancelling it sends a
//     CANCEL frame, and a Decode stops within one token.
//   - A Client multiplexes calls over one connection and is safe for
//     concurrent use; a Session runs one call at a time (the server answers
//     ErrSessionBusy otherwise).
//   - Errors from the daemon are *RemoteError and match the sentinels in
//     errors.go with errors.Is; a broken connection fails every pending
//     call with ErrClosed.
//
// Files: client.go (Client, Dial, the call loop, Status, LoadModel,
// Explain), session.go (Session, the session constructors, EnsurePrefix,
// PrefillSuffix, Decode, Close), manifest.go (Manifest, Segment, kinds,
// classes, control spans), stopreason.go (StopReason), results.go and
// explain.go (the reply structs), snapshot.go (Snapshot, Restore,
// Snapshots, VerifyCold), metrics.go, edit.go (ReportEdit), progress.go
// (WithProgress), errors.go (sentinels, RemoteError).
package client
