package chat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/third_party/jinja"
)

// Limits of one rendering, checked before any work so a conversation
// that cannot fit a manifest is refused at once with the limit named.
const (
	// MaxMessages: every message may become a segment, besides the system
	// prompt, the tool definitions and the generation prompt.
	MaxMessages = policy.MaxSegments - 3
	// MaxTools bounds the tool definitions.
	MaxTools = 1024
	// MaxTextBytes bounds the text of messages and tool definitions in
	// all: the manifest's own bound.
	MaxTextBytes = policy.MaxManifestBytes
	// MaxTemplateBytes bounds a chat template's source (real ones are a
	// few KiB; the parser recurses on nesting).
	MaxTemplateBytes = 256 << 10
	// RenderTimeout bounds one rendering of a conversation by a template.
	RenderTimeout = 10 * time.Second
)

// renderLimits bound every run of a model's template (third_party/jinja): a
// template is code from a downloaded file and runs in this box.
var renderLimits = jinja.Limits{
	MaxSteps: 10_000_000,
	MaxDepth: 64,
	MaxBytes: policy.MaxManifestBytes,
	MaxItems: 1 << 20,
}

// ErrLimit reports a conversation over one of the limits above, or a
// template that broke its box while rendering it.
var ErrLimit = errors.New("chat: over a limit")

// ErrCancelled reports a rendering stopped because its context ended.
var ErrCancelled = errors.New("chat: rendering cancelled")

// CheckLimits checks msgs and tools against MaxMessages, MaxTools and
// MaxTextBytes, in time linear in their number and without copying.
func CheckLimits(msgs []Message, tools []Tool) error {
	if len(msgs) > MaxMessages {
		return fmt.Errorf("%w: %d messages, the most is %d (MaxMessages: each may become a manifest segment, of which there are at most %d)", ErrLimit, len(msgs), MaxMessages, policy.MaxSegments)
	}
	if len(tools) > MaxTools {
		return fmt.Errorf("%w: %d tools, the most is %d (MaxTools)", ErrLimit, len(tools), MaxTools)
	}
	total := 0
	for _, m := range msgs {
		total += len(m.Content) + len(m.Reasoning)
		for _, c := range m.ToolCalls {
			total += len(c.Name) + len(c.Arguments)
		}
	}
	for _, t := range tools {
		total += len(t.Name) + len(t.Description) + len(t.Parameters)
	}
	if total > MaxTextBytes {
		return fmt.Errorf("%w: %d bytes of text, the most is %d (MaxTextBytes)", ErrLimit, total, MaxTextBytes)
	}
	return nil
}

// boxed wraps a template's error: a broken limit or a cancelled context
// keep their sentinels, anything else is ErrTemplate.
func boxed(ctx context.Context, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), ErrLimit):
		return fmt.Errorf("%w: %w", ErrTemplate, context.Cause(ctx))
	case ctx.Err() != nil:
		return fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
	case errors.Is(err, jinja.ErrLimit), errors.Is(err, jinja.ErrPanic):
		return fmt.Errorf("%w: %w: %w", ErrTemplate, ErrLimit, err)
	}
	return fmt.Errorf("%w: %w", ErrTemplate, err)
}
