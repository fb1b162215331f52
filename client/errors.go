package client

import (
	"errors"

	"github.com/ctxd/ctxd/protocol"
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

// RemoteError is the daemon's error as received; errors.As gives its code
// and, for ErrContextOverflow, the numbers.
type RemoteError = protocol.RemoteError
