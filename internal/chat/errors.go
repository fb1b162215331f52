package chat

import "errors"

// ErrTemplate reports a chat template that does not parse or does not
// render; the caller may fall back to the fallback template.
var ErrTemplate = errors.New("chat: bad template")

// ErrMessages reports a conversation that cannot be rendered: no messages,
// an unknown role, invalid UTF-8 or tool arguments that are not JSON.
var ErrMessages = errors.New("chat: bad messages")
