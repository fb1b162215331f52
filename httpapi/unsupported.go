package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Request fields ctxd does not honour are refused with a 400 naming the
// field, never ignored: a client that asks for log probabilities, a JSON
// schema, a forced tool call, a suffix or best-of would otherwise get an
// answer that silently lacks what it asked for. Values that ask for
// nothing (logprobs false, response_format text, tool_choice auto or
// none, format "") pass.

// unhonoured is every such field of every endpoint; the decoders read the
// body into it besides their own request type.
type unhonoured struct {
	Logprobs       json.RawMessage `json:"logprobs"`
	TopLogprobs    json.RawMessage `json:"top_logprobs"`
	ResponseFormat json.RawMessage `json:"response_format"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	Suffix         json.RawMessage `json:"suffix"`
	BestOf         json.RawMessage `json:"best_of"`
	Format         json.RawMessage `json:"format"`
}

// checkUnhonoured refuses the fields of body that path does not honour.
func checkUnhonoured(path string, body []byte) error {
	var u unhonoured
	if json.Unmarshal(body, &u) != nil {
		return nil // the request's own decoder reports malformed JSON
	}
	refuse := func(field, why string) error {
		return &apiError{status: 400, typ: "invalid_request_error", code: "unsupported_parameter",
			message: fmt.Sprintf("%s is not supported by ctxd: %s; remove it from the request", field, why), cause: ErrBadRequest}
	}
	isNull := func(v json.RawMessage) bool {
		v = bytes.TrimSpace(v)
		return len(v) == 0 || string(v) == "null"
	}
	switch path {
	case "/v1/chat/completions", "/v1/completions":
		if !isNull(u.Logprobs) && string(bytes.TrimSpace(u.Logprobs)) != "false" {
			return refuse("logprobs", "ctxd does not return log probabilities")
		}
		if !isNull(u.TopLogprobs) && string(bytes.TrimSpace(u.TopLogprobs)) != "0" {
			return refuse("top_logprobs", "ctxd does not return log probabilities")
		}
	}
	switch path {
	case "/v1/chat/completions":
		if !isNull(u.ResponseFormat) {
			var rf struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(u.ResponseFormat, &rf) != nil || rf.Type != "text" {
				return refuse("response_format "+strings.TrimSpace(string(u.ResponseFormat)), "ctxd does not constrain output to JSON or a schema (only {\"type\":\"text\"})")
			}
		}
		if !isNull(u.ToolChoice) {
			switch s := string(bytes.TrimSpace(u.ToolChoice)); s {
			case `"auto"`, `"none"`:
			default:
				return refuse("tool_choice "+s, "ctxd cannot force a tool call (only \"auto\" and \"none\")")
			}
		}
	case "/v1/completions":
		if !isNull(u.Suffix) && string(bytes.TrimSpace(u.Suffix)) != `""` {
			return refuse("suffix", "ctxd does not fill in the middle")
		}
		if !isNull(u.BestOf) && string(bytes.TrimSpace(u.BestOf)) != "1" {
			return refuse("best_of", "ctxd generates one completion")
		}
	case "/api/chat", "/api/generate":
		if !isNull(u.Format) && string(bytes.TrimSpace(u.Format)) != `""` {
			return refuse("format", "ctxd does not constrain output to JSON or a schema")
		}
	}
	return nil
}
