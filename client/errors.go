package client

import (
	"errors"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Sentinel errors; match them with errors.Is.
var (
	ErrProtocol          = protocol.ErrProtocol
	ErrVersion           = protocol.ErrVersion
	ErrInvalidArgument   = protocol.ErrInvalidArgument
	ErrInvalidManifest   = protocol.ErrInvalidManifest
	ErrNotFound          = protocol.ErrNotFound
	ErrModelBusy         = protocol.ErrModelBusy
	ErrNoModel           = protocol.ErrNoModel
	ErrContextOverflow   = protocol.ErrContextOverflow
	ErrCancelled         = protocol.ErrCancelled
	ErrInternal          = protocol.ErrInternal
	ErrPermissionDenied  = protocol.ErrPermissionDenied
	ErrBadModel          = protocol.ErrBadModel
	ErrSessionBusy       = protocol.ErrSessionBusy
	ErrIncompatible      = protocol.ErrIncompatible
	ErrResourceExhausted = protocol.ErrResourceExhausted
	// ErrClosed: the connection is closed or broke.
	ErrClosed = errors.New("ctxd client: connection closed")
)

// RemoteError is the daemon's error as received: errors.As gives it, and
// for ErrContextOverflow the numbers. It unwraps to the sentinel of the
// daemon's error code, so errors.Is(err, ErrNotFound) and the like work.
type RemoteError struct {
	// Err is the sentinel of the daemon's code (ErrInternal for a code this
	// client does not know).
	Err error
	// Message is the daemon's description; may be empty.
	Message string
	// Overflow is set with ErrContextOverflow when the daemon sent sizes.
	Overflow *OverflowInfo
	text     string
}

// OverflowInfo is the size of a prompt that did not fit its context.
type OverflowInfo struct {
	PromptTokens  int64 // tokens the request needs resident
	ContextTokens int64 // the context's capacity in tokens
}

// Error names the sentinel, the overflow numbers when present, and the
// daemon's message, e.g. "context overflow: prompt needs 2300 tokens,
// context holds 2048".
func (e *RemoteError) Error() string { return e.text }

// Unwrap returns the sentinel of the daemon's code.
func (e *RemoteError) Unwrap() error { return e.Err }

// remoteError decodes the daemon's error of a failed call; nil gives nil.
func remoteError(w *pb.Error) error {
	if w == nil {
		return nil
	}
	re := protocol.FromWire(w).(*protocol.RemoteError)
	out := &RemoteError{Err: re.Unwrap(), Message: re.Message, text: re.Error()}
	if re.Overflow != nil {
		out.Overflow = &OverflowInfo{PromptTokens: re.Overflow.PromptTokens, ContextTokens: re.Overflow.ContextTokens}
	}
	return out
}
