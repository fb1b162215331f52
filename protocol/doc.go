// Package protocol is the framing and message codec of the ctxd wire
// protocol, shared by the daemon and its clients. PROTOCOL.md at the
// repository root is the specification; this package implements its frame
// layer (frame.go), a connection wrapper that reads and writes frames and
// protobuf messages (channel.go), version negotiation (version.go) and the
// mapping between Go errors and wire error codes (errors.go). The messages
// themselves live in package ctxdpb.
//
// A frame is a 10-byte big-endian header (payload length, stream id, type,
// flags) followed by the payload: one protobuf message, or nothing for
// CANCEL.
//
// Invariants:
//
//   - Frames are atomic on the wire: a Channel holds one writer lock and
//     sends header and payload in a single Write call, so frames of
//     concurrent writers never interleave. A failed write poisons the
//     Channel: the stream may hold part of a frame, so every later write
//     returns the same error. Frames a sender queued (Channel.Queue) leave
//     in order, in front of the next frame written, in the same Write call.
//   - No frame exceeds the negotiated maximum: writers refuse larger
//     payloads with ErrFrameTooLarge before sending anything, and readers
//     reject larger announced lengths before reading or allocating the
//     payload.
//   - Every header is validated before its payload is used: unknown types,
//     stray flag bits, stream id 0 on REQUEST, DATA or CANCEL, and truncated
//     frames are malformed (ErrMalformedFrame).
//   - Errors read from the peer (malformed or oversized frames, undecodable
//     payloads) are fatal for that connection only: they unwrap to
//     ErrProtocol, the connection is closed, and nothing else is affected.
//     Nothing in this package panics on peer input.
//   - One reader goroutine per Channel; a payload returned by ReadFrame is
//     valid until the next ReadFrame.
//   - Failures are sentinel errors usable with errors.Is; each wire
//     ErrorCode has exactly one sentinel, and ToWire/FromWire map between
//     them without loss.
//
// Files: frame.go (the frame header and its codec), channel.go (sending and
// receiving frames on one connection), version.go (version negotiation),
// rawread_linux.go (a client's reads of a Unix socket without the
// scheduler's system-call bookkeeping, for streamed frames' CPU cost), tokenwire.go (a
// streamed token's event encoded without the protobuf runtime, byte-equal
// to its encoding), errors.go (one
// sentinel per wire ErrorCode, ToWire/FromWire), convert.go
// (policy types to and from the wire), socket.go (the default socket path
// and its length limit); ctxdpb/ holds the protobuf schema and generated
// code.
package protocol
