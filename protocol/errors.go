package protocol

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Sentinel errors shared by client and server, one per ctxdpb.ErrorCode.
// Servers return them (wrapped with detail) from calls and ToWire turns them
// into codes; clients receive a *RemoteError that unwraps to the sentinel of
// its code. Their texts are what users see for a bare code.
var (
	ErrProtocol          = errors.New("protocol error")               // ERROR_CODE_PROTOCOL: the connection closes
	ErrVersion           = errors.New("unsupported protocol version") // ERROR_CODE_VERSION
	ErrInvalidArgument   = errors.New("invalid argument")             // ERROR_CODE_INVALID_ARGUMENT
	ErrInvalidManifest   = errors.New("invalid manifest")             // ERROR_CODE_INVALID_MANIFEST
	ErrNotFound          = errors.New("not found")                    // ERROR_CODE_NOT_FOUND
	ErrModelBusy         = errors.New("model busy")                   // ERROR_CODE_MODEL_BUSY
	ErrNoModel           = errors.New("no model loaded")              // ERROR_CODE_NO_MODEL
	ErrContextOverflow   = errors.New("context overflow")             // ERROR_CODE_CONTEXT_OVERFLOW
	ErrCancelled         = errors.New("cancelled")                    // ERROR_CODE_CANCELLED
	ErrInternal          = errors.New("internal error")               // ERROR_CODE_INTERNAL
	ErrPermissionDenied  = errors.New("permission denied")            // ERROR_CODE_PERMISSION_DENIED
	ErrBadModel          = errors.New("bad model")                    // ERROR_CODE_BAD_MODEL
	ErrSessionBusy       = errors.New("session busy")                 // ERROR_CODE_SESSION_BUSY
	ErrIncompatible      = errors.New("incompatible manifest")        // ERROR_CODE_INCOMPATIBLE
	ErrResourceExhausted = errors.New("resource exhausted")           // ERROR_CODE_RESOURCE_EXHAUSTED
)

// lastCode is the highest ErrorCode with a sentinel.
const lastCode = ctxdpb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED

// ErrorForCode is the sentinel of code. UNSPECIFIED and codes this version
// does not know give ErrInternal.
func ErrorForCode(code ctxdpb.ErrorCode) error {
	switch code {
	case ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL:
		return ErrProtocol
	case ctxdpb.ErrorCode_ERROR_CODE_VERSION:
		return ErrVersion
	case ctxdpb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		return ErrInvalidArgument
	case ctxdpb.ErrorCode_ERROR_CODE_INVALID_MANIFEST:
		return ErrInvalidManifest
	case ctxdpb.ErrorCode_ERROR_CODE_NOT_FOUND:
		return ErrNotFound
	case ctxdpb.ErrorCode_ERROR_CODE_MODEL_BUSY:
		return ErrModelBusy
	case ctxdpb.ErrorCode_ERROR_CODE_NO_MODEL:
		return ErrNoModel
	case ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW:
		return ErrContextOverflow
	case ctxdpb.ErrorCode_ERROR_CODE_CANCELLED:
		return ErrCancelled
	case ctxdpb.ErrorCode_ERROR_CODE_INTERNAL:
		return ErrInternal
	case ctxdpb.ErrorCode_ERROR_CODE_PERMISSION_DENIED:
		return ErrPermissionDenied
	case ctxdpb.ErrorCode_ERROR_CODE_BAD_MODEL:
		return ErrBadModel
	case ctxdpb.ErrorCode_ERROR_CODE_SESSION_BUSY:
		return ErrSessionBusy
	case ctxdpb.ErrorCode_ERROR_CODE_INCOMPATIBLE:
		return ErrIncompatible
	case ctxdpb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED:
		return ErrResourceExhausted
	}
	return ErrInternal
}

// OverflowInfo is the size of a prompt that did not fit its context.
type OverflowInfo struct {
	PromptTokens  int64 // tokens the request needs resident
	ContextTokens int64 // the context's capacity in tokens
}

// OverflowError is what a server returns when a prompt does not fit the
// context; ToWire sends its numbers in Error.overflow. It matches
// ErrContextOverflow with errors.Is.
type OverflowError struct {
	PromptTokens  int64
	ContextTokens int64
}

// Error returns e.g. "context overflow: prompt needs 2300 tokens, context
// holds 2048".
func (e OverflowError) Error() string {
	return fmt.Sprintf("%s: prompt needs %d tokens, context holds %d", ErrContextOverflow, e.PromptTokens, e.ContextTokens)
}

// Is reports whether target is ErrContextOverflow.
func (e OverflowError) Is(target error) bool { return target == ErrContextOverflow }

// RemoteError is a call's failure as received from the peer. It unwraps to
// the sentinel of Code (ErrInternal for codes this version does not know),
// so errors.Is(err, ErrContextOverflow) and the like work on it.
type RemoteError struct {
	Code     ctxdpb.ErrorCode
	Message  string        // the peer's description; may be empty
	Overflow *OverflowInfo // set with ERROR_CODE_CONTEXT_OVERFLOW when known
}

// Error names the code, the overflow numbers when present, and the peer's
// message unless it already says as much, e.g. "context overflow: prompt
// needs 2300 tokens, context holds 2048" or "not found: session 7".
func (e *RemoteError) Error() string {
	name := codeText(e.Code)
	head := name
	if e.Overflow != nil {
		head = fmt.Sprintf("%s: prompt needs %d tokens, context holds %d", name, e.Overflow.PromptTokens, e.Overflow.ContextTokens)
	}
	msg := e.Message
	switch {
	case msg == "" || msg == name:
		return head
	case strings.Contains(msg, head):
		return msg
	case e.Overflow == nil && strings.Contains(msg, name):
		return msg
	}
	return head + ": " + msg
}

// Unwrap returns the sentinel of e.Code.
func (e *RemoteError) Unwrap() error { return ErrorForCode(e.Code) }

// codeText is the text of code's sentinel, or "error code N" for codes this
// version does not know.
func codeText(code ctxdpb.ErrorCode) string {
	if code > ctxdpb.ErrorCode_ERROR_CODE_UNSPECIFIED && code <= lastCode {
		return ErrorForCode(code).Error()
	}
	return fmt.Sprintf("error code %d", int32(code))
}

// ToWire turns err into the wire Error of a failed call; nil gives nil.
// The code is that of the outermost node of err's chain (walked as
// errors.Is walks it, a wrapper before what it wraps) that names one: a
// *RemoteError (passed through with its overflow), an OverflowError
// (CONTEXT_OVERFLOW with the numbers), or a sentinel. So a server error
// wrapped as fmt.Errorf("%w: %w", ErrInternal, cause) is INTERNAL even when
// cause matches another sentinel. Otherwise: the first sentinel err
// matches by errors.Is (errors with their own Is method; frame errors read
// from the peer match ErrProtocol); CANCELLED for context.Canceled and
// context.DeadlineExceeded; RESOURCE_EXHAUSTED for a frame this side
// refused to send as too large; INTERNAL otherwise. The message is
// err.Error().
func ToWire(err error) *ctxdpb.Error {
	if err == nil {
		return nil
	}
	w := &ctxdpb.Error{Code: ctxdpb.ErrorCode_ERROR_CODE_INTERNAL, Message: err.Error()}
	if outermostCode(err, err, w) {
		return w
	}
	for code := ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL; code <= lastCode; code++ {
		if errors.Is(err, ErrorForCode(code)) {
			w.Code = code
			return w
		}
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		w.Code = ctxdpb.ErrorCode_ERROR_CODE_CANCELLED
	case errors.Is(err, ErrFrameTooLarge):
		w.Code = ctxdpb.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED
	}
	return w
}

// outermostCode fills w from the first node of err's tree, in pre-order,
// that names a wire code, and reports whether one did. top is the error
// ToWire was given.
func outermostCode(err, top error, w *ctxdpb.Error) bool {
	switch e := err.(type) {
	case *RemoteError:
		if e == nil {
			return false
		}
		w.Code = e.Code
		if e == top {
			w.Message = e.Message
		}
		if e.Overflow != nil {
			w.Overflow = &ctxdpb.Overflow{PromptTokens: e.Overflow.PromptTokens, ContextTokens: e.Overflow.ContextTokens}
		}
		return true
	case OverflowError:
		w.Code = ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW
		w.Overflow = &ctxdpb.Overflow{PromptTokens: e.PromptTokens, ContextTokens: e.ContextTokens}
		return true
	case *OverflowError:
		if e == nil {
			return false
		}
		w.Code = ctxdpb.ErrorCode_ERROR_CODE_CONTEXT_OVERFLOW
		w.Overflow = &ctxdpb.Overflow{PromptTokens: e.PromptTokens, ContextTokens: e.ContextTokens}
		return true
	}
	for code := ctxdpb.ErrorCode_ERROR_CODE_PROTOCOL; code <= lastCode; code++ {
		if err == ErrorForCode(code) {
			w.Code = code
			return true
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		if next := u.Unwrap(); next != nil {
			return outermostCode(next, top, w)
		}
	case interface{ Unwrap() []error }:
		for _, next := range u.Unwrap() {
			if next != nil && outermostCode(next, top, w) {
				return true
			}
		}
	}
	return false
}

// FromWire turns the wire Error of a failed call into a *RemoteError; nil
// gives nil. A zero code still reports a failure (it unwraps to
// ErrInternal).
func FromWire(w *ctxdpb.Error) error {
	if w == nil {
		return nil
	}
	re := &RemoteError{Code: w.GetCode(), Message: w.GetMessage()}
	if o := w.GetOverflow(); o != nil {
		re.Overflow = &OverflowInfo{PromptTokens: o.GetPromptTokens(), ContextTokens: o.GetContextTokens()}
	}
	return re
}
