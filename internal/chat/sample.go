package chat

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// SampleTimeout bounds the sample renderings NewTemplate runs.
const SampleTimeout = 5 * time.Second

// samples are conversations every template is rendered with once, when it
// is loaded, so that a template that crashes, loops or balloons is refused
// at start with the reason instead of on a chat request. The first is the
// simplest conversation there is: a template that cannot render it is
// refused too. The others may be refused by the template itself
// (raise_exception on roles or tools it does not support); only a broken
// limit refuses the template then.
var samples = []struct {
	msgs  []Message
	tools []Tool
}{
	{msgs: []Message{{Role: RoleUser, Content: "Hello."}}},
	{msgs: []Message{
		{Role: RoleSystem, Content: "You are a coding agent."},
		{Role: RoleUser, Content: "Read main.go."},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "read_file", Arguments: `{"path":"main.go"}`}}},
		{Role: RoleTool, ToolCallID: "call_1", Name: "read_file", Content: "package main"},
		{Role: RoleAssistant, Content: "It is a Go program."},
		{Role: RoleUser, Content: "Thanks."},
	}, tools: []Tool{{Name: "read_file", Description: "Read a file", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}}}`)}}},
}

// checkSamples renders the samples through t within SampleTimeout.
func (t *Template) checkSamples() error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), SampleTimeout,
		fmt.Errorf("%w: rendering the samples took over %v (SampleTimeout)", ErrLimit, SampleTimeout))
	defer cancel()
	for i, s := range samples {
		_, err := t.RenderContext(ctx, s.msgs, s.tools)
		switch {
		case err == nil:
		case i == 0 || errors.Is(err, ErrLimit) || errors.Is(err, ErrCancelled):
			return fmt.Errorf("%w: rendering a sample conversation (%d messages): %w", ErrTemplate, len(s.msgs), err)
		}
	}
	return nil
}
