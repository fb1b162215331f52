package httpapi

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ctxd/ctxd/protocol"
)

// Sentinel errors of the HTTP door, usable with errors.Is.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrForbidden    = errors.New("forbidden")
	ErrUnauthorized = errors.New("unauthorized")
	ErrNotFound     = errors.New("not found")
	ErrTooManyConns = errors.New("too many connections")
	ErrLimit        = errors.New("request over a limit")
)

// apiError is an error as both APIs report it: an HTTP status, and for
// OpenAI a type and a code.
type apiError struct {
	status  int
	typ     string // OpenAI error.type
	code    string // OpenAI error.code; "" for null
	message string
	cause   error
}

func (e *apiError) Error() string { return e.message }
func (e *apiError) Unwrap() error { return e.cause }

func badRequest(format string, a ...any) *apiError {
	msg := fmt.Sprintf(format, a...)
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: msg, cause: fmt.Errorf("%w: %s", ErrBadRequest, msg)}
}

// toAPIError maps any error of a turn onto what the client sees.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var ov protocol.OverflowError
	var re *protocol.RemoteError
	switch {
	case errors.As(err, &ov):
		return overflowError(int(ov.PromptTokens), int(ov.ContextTokens), err)
	case errors.As(err, &re) && re.Overflow != nil:
		return overflowError(int(re.Overflow.PromptTokens), int(re.Overflow.ContextTokens), err)
	case errors.Is(err, protocol.ErrNoModel):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "model_not_loaded", message: "no model is loaded in ctxd (ctxctl load --model FILE)", cause: err}
	case errors.Is(err, protocol.ErrInvalidArgument), errors.Is(err, protocol.ErrInvalidManifest):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", message: err.Error(), cause: err}
	case errors.Is(err, protocol.ErrCancelled):
		return &apiError{status: 499, typ: "server_error", code: "cancelled", message: err.Error(), cause: err}
	case errors.Is(err, protocol.ErrResourceExhausted):
		return &apiError{status: http.StatusInsufficientStorage, typ: "server_error", code: "resource_exhausted", message: err.Error(), cause: err}
	case errors.Is(err, protocol.ErrModelBusy), errors.Is(err, protocol.ErrSessionBusy):
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "busy", message: err.Error(), cause: err}
	}
	return &apiError{status: http.StatusInternalServerError, typ: "server_error", message: err.Error(), cause: err}
}

func overflowError(prompt, context int, cause error) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "context_length_exceeded",
		message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. (ctxd runs this model with dense attention; start it with a hot set, e.g. without --ctx, to serve longer prompts)", context, prompt),
		cause:   cause}
}
