package httpapi

import (
	"errors"
	"net/http"

	"github.com/ctxd/ctxd/internal/chat"
)

// renderError maps a failed rendering onto what the client sees: a
// conversation over a limit is a 413 naming the limit (checked before any
// rendering), a client gone is 499, a model template that broke its box
// is the server's 500, anything else the request's 400.
func renderError(tmpl *chat.Template, err error) error {
	switch {
	case errors.Is(err, chat.ErrCancelled):
		return &apiError{status: 499, typ: "server_error", code: "cancelled", message: err.Error(), cause: err}
	case errors.Is(err, chat.ErrTemplate) && errors.Is(err, chat.ErrLimit):
		return &apiError{status: http.StatusInternalServerError, typ: "server_error", code: "template_limit",
			message: "the model's chat template " + tmpl.Name() + " broke its limits rendering this conversation: " + err.Error(), cause: err}
	case errors.Is(err, chat.ErrLimit):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large", message: err.Error(),
			cause: errors.Join(ErrLimit, err)}
	}
	return badRequest("rendering the conversation with template %s: %v", tmpl.Name(), err)
}
