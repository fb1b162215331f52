package chat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxd/ctxd/policy"
)

// Segment IDs.
const (
	idSystem = "system"
	idTools  = "tools"
	idGen    = "gen"
	idPrompt = "prompt"
)

// msgID is the ID of the segment that starts with message i.
func msgID(i int) string { return "msg-" + strconv.Itoa(i) }

// Render renders msgs and tools with the assistant generation prompt and
// cuts the text at message boundaries into manifest segments, each
// tokenized on its own by ctxd so reuse is exact turn to turn:
// system -> policy.KindSystem, tool definitions -> policy.KindTools (both
// task_pinned, Stable); earlier history -> policy.KindUserTurn
// (user/assistant) / policy.KindTerminal (tool results), Stable; the newest
// message(s) after the last assistant message plus the generation prompt ->
// volatile (Stable false). The concatenation of all segments' Text is
// exactly the full rendering (less a leading BOS text). Segment IDs are
// stable ("system", "tools", "msg-<i>", "gen").
//
// The cut points are those of rendering every prefix of msgs and keeping
// those that are a prefix of the full rendering; a message whose rendering
// depends on later messages is merged with its neighbours. A long
// conversation finds the same ones from one marked rendering and a few
// prefixes (fastcut.go). A segment is
// stable only if two probe continuations (a text reply and a user message;
// a tool call and its result) render it unchanged.
//
// Each segment's Control marks the control markers the template wrote in
// it, and only those: marker texts inside message content or tool
// definitions stay text (see control.go).
func (t *Template) Render(msgs []Message, tools []Tool) (policy.Manifest, error) {
	return t.RenderContext(context.Background(), msgs, tools)
}

// RenderContext is Render ending early, with an error, when ctx ends. The
// conversation is checked against Limits before any rendering.
func (t *Template) RenderContext(ctx context.Context, msgs []Message, tools []Tool) (policy.Manifest, error) {
	if err := CheckLimits(msgs, tools); err != nil {
		return policy.Manifest{}, err
	}
	return t.renderControlled(ctx, msgs, tools)
}

// renderSegments is Render without control spans.
func (t *Template) renderSegments(ctx context.Context, msgs []Message, tools []Tool) (policy.Manifest, error) {
	if len(msgs) == 0 {
		return policy.Manifest{}, fmt.Errorf("%w: no messages", ErrMessages)
	}
	if err := checkMessages(msgs, tools); err != nil {
		return policy.Manifest{}, err
	}
	full, err := t.text(ctx, msgs, tools, true)
	if err != nil {
		return policy.Manifest{}, err
	}
	n := len(msgs)
	// bounds[k] is the end of messages[:k] in full, or -1 when there is no
	// cut point there.
	bounds, err := t.bounds(ctx, msgs, tools, full)
	if err != nil {
		return policy.Manifest{}, err
	}
	// The head is everything before the first non-system message: the
	// template's preamble, the system prompt and the tool definitions.
	head := 0
	if msgs[0].Role == RoleSystem && bounds[1] >= 0 {
		head = 1
	}
	headEnd := max(bounds[head], 0) // -1: the preamble goes with the first message
	var segs []policy.Segment
	add := func(id string, kind policy.SegmentKind, class policy.CacheClass, from, to int) {
		if to > from {
			segs = append(segs, policy.Segment{ID: id, Kind: kind, Class: class, Text: full[from:to]})
		}
	}
	// Split the head into system and tools where rendering it without
	// tools departs from rendering it with them.
	sysEnd := headEnd
	if len(tools) > 0 {
		sysEnd = 0
		if s, err := t.text(ctx, msgs[:head], nil, false); err == nil {
			sysEnd = t.markerFloor(full, min(commonPrefix(s, full[:headEnd]), headEnd))
		}
	}
	add(idSystem, policy.KindSystem, policy.ClassTaskPinned, 0, sysEnd)
	add(idTools, policy.KindTools, policy.ClassTaskPinned, sysEnd, headEnd)
	// Messages, each from its start to the next cut point.
	genStart := bounds[n]
	if genStart < 0 {
		genStart = len(full)
	}
	for i := head; i < n; {
		from := headEnd
		if i > head {
			from = bounds[i]
		}
		j := i + 1
		for j < n && bounds[j] < 0 {
			j++
		}
		to := genStart
		if j < n {
			to = bounds[j]
		}
		kind := policy.KindUserTurn
		if msgs[i].Role == RoleTool {
			kind = policy.KindTerminal
		}
		add(msgID(i), kind, policy.ClassUnspecified, from, to)
		i = j
	}
	add(idGen, policy.KindUserTurn, policy.ClassUnspecified, genStart, len(full))
	if len(segs) == 0 {
		return policy.Manifest{}, fmt.Errorf("%w: the conversation renders as empty text", ErrMessages)
	}
	markStable(segs, t.stableEnd(ctx, msgs, tools, full, bounds, headEnd))
	if err := ctx.Err(); err != nil { // the probes above may have been cut short
		return policy.Manifest{}, fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
	}
	return policy.Manifest{Segments: segs, Template: t.name}, nil
}

// bounds returns the cut points of full, the rendering of msgs and tools:
// bounds[k] is where messages[:k] end in full, or -1 when there is no cut
// point there. A long conversation's are found in time linear in its
// length (fastcut.go) when its rendering allows; otherwise, and always
// with the same answer, by rendering each prefix (prefixBounds).
func (t *Template) bounds(ctx context.Context, msgs []Message, tools []Tool, full string) ([]int, error) {
	// A turn that extends one already cut finds most prefixes in the cut
	// cache: then only its new messages are rendered, fewer renderings
	// than the fast way's samples.
	if len(msgs) >= fastCutMinMessages && t.cuts.missing(prefixKeys(msgs, tools)) > fastCutMaxMisses {
		b, ok, err := t.fastBounds(ctx, msgs, tools, full)
		if err != nil || ok {
			return b, err
		}
	}
	return t.prefixBounds(ctx, msgs, tools, full)
}

// prefixBounds is bounds found by cutting at each prefix in turn: time
// quadratic in the messages, less what the cut cache holds.
func (t *Template) prefixBounds(ctx context.Context, msgs []Message, tools []Tool, full string) ([]int, error) {
	n := len(msgs)
	bounds := make([]int, n+1)
	keys := prefixKeys(msgs, tools)
	ph := &prefixHasher{s: full}
	last := 0
	for k := 0; k <= n; k++ {
		var err error
		if bounds[k], err = t.cut(ctx, msgs, k, tools, full, last, keys[k], ph); err != nil {
			return nil, err
		}
		if bounds[k] >= 0 {
			last = bounds[k]
		}
	}
	return bounds, nil
}

// cut returns where messages[:k] end in full, after last, or -1 when
// there is no cut point there. The exact cut is the end of rendering
// messages[:k] when that is a prefix of full. Templates that render the
// last user message apart (Mistral puts the tools and the system prompt
// there) render messages[:k] as history only when more turns follow: then
// the cut is where such a rendering departs from full, moved back to the
// start of the marker both begin the next message with and to the end of
// the last end-of-turn marker. What the renderings gave is kept in t.cuts
// and checked against full before it is used again.
func (t *Template) cut(ctx context.Context, msgs []Message, k int, tools []Tool, full string, last int, key uint64, ph *prefixHasher) (int, error) {
	e, cached := t.cuts.get(key)
	var exact bool
	switch {
	case cached && e.exactLen >= 0 && e.exactLen <= len(full) && ph.sum(e.exactLen) == e.exactHash:
		exact = true
	case cached && e.exactLen < 0:
		// The template refused messages[:k]; it still does.
	default:
		e = cutEntry{exactLen: -1}
		s, err := t.text(ctx, msgs[:k], tools, false)
		if transient(err) {
			return -1, err // not the template's answer: nothing cached
		}
		if err == nil {
			e.exactLen, e.exactHash = len(s), hashString(s)
			exact = strings.HasPrefix(full, s)
		}
	}
	defer func() { t.cuts.put(key, e) }()
	if exact && e.exactLen >= last {
		return e.exactLen, nil
	}
	if k == 0 || k == len(msgs) {
		return -1, nil
	}
	if e.probed && !e.probeErr {
		c := e.probeLen
		if c > len(full) || ph.sum(c) != e.probeHash || (e.probeNext >= 0 && c < len(full) && full[c] == byte(e.probeNext)) {
			e.probed = false // full departs elsewhere now
		}
	}
	if !e.probed {
		e.probed = true
		s, err := t.text(ctx, append(msgs[:k:k], historyProbe...), tools, false)
		if transient(err) {
			e.probed = false
			return -1, err
		}
		if err != nil {
			e.probeErr = true
		} else {
			c := commonPrefix(s, full)
			e.probeErr, e.probeLen, e.probeHash, e.probeNext = false, c, hashString(s[:c]), -1
			if c < len(s) {
				e.probeNext = int(s[c])
			}
		}
	}
	if e.probeErr {
		return -1, nil
	}
	c := t.markerFloor(full, e.probeLen)
	if c > last {
		c = t.endFloor(full, last, c)
	}
	if c > last && c < len(full) {
		return c, nil
	}
	return -1, nil
}

// transient reports an error that is not the template's answer to a
// conversation (a cancelled context, a broken time or size limit): the
// rendering fails with it and nothing is cached.
func transient(err error) bool {
	return errors.Is(err, ErrCancelled) || errors.Is(err, ErrLimit)
}

// stableEnd returns the offset in full up to which the rendering is
// stable: the end of the last assistant message (the head when there is
// none), cut back to what both probe continuations render unchanged.
func (t *Template) stableEnd(ctx context.Context, msgs []Message, tools []Tool, full string, bounds []int, headEnd int) int {
	// The end of the last assistant message, or of the last cut point
	// before it when the template renders a trailing assistant message
	// differently (Qwen3 adds an empty think block to it).
	end := headEnd
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleAssistant {
			for k := i + 1; k > 0; k-- {
				if bounds[k] >= 0 {
					end = max(end, bounds[k])
					break
				}
			}
			break
		}
	}
	for _, cont := range probesAfter(msgs[len(msgs)-1]) {
		s, err := t.text(ctx, append(msgs[:len(msgs):len(msgs)], cont...), tools, false)
		if err != nil {
			// A template that refuses a plain continuation cannot
			// vouch for anything past the head.
			return min(end, headEnd)
		}
		end = min(end, commonPrefix(s, full))
	}
	return end
}

// probeText is the text of probe messages.
const probeText = "probe"

// historyProbe follows messages[:k] to render them as history: a user
// turn, a reply and another user turn, so that the next message is neither
// the last nor the last user message.
var historyProbe = []Message{
	{Role: RoleUser, Content: probeText}, {Role: RoleAssistant, Content: probeText}, {Role: RoleUser, Content: probeText},
}

// probesAfter returns the continuations a stable segment must survive,
// after a conversation ending with last: a text reply and a new user
// message; a tool call and its result. A conversation already ending with
// a reply continues with the user message (or, after a tool call, its
// result).
func probesAfter(last Message) [][]Message {
	call := ToolCall{ID: "probe0001", Name: probeText, Arguments: `{"probe":"probe"}`}
	user := Message{Role: RoleUser, Content: probeText}
	result := Message{Role: RoleTool, ToolCallID: call.ID, Name: probeText, Content: probeText}
	caller := Message{Role: RoleAssistant, ToolCalls: []ToolCall{call}}
	if last.Role != RoleAssistant {
		return [][]Message{{{Role: RoleAssistant, Content: probeText}, user}, {caller, result}}
	}
	if len(last.ToolCalls) > 0 {
		result.ToolCallID, result.Name = last.ToolCalls[0].ID, last.ToolCalls[0].Name
		return [][]Message{{result}}
	}
	return [][]Message{{user}, {user, caller, result}}
}

// markStable marks stable every segment that ends at or before end, up to
// the first that does not.
func markStable(segs []policy.Segment, end int) {
	off := 0
	for i := range segs {
		off += len(segs[i].Text)
		if off > end {
			return
		}
		segs[i].Stable = true
	}
}

// text renders with t, less a leading BOS text (ctxd adds BOS as a token).
func (t *Template) text(ctx context.Context, msgs []Message, tools []Tool, gen bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
	}
	s, err := t.render(ctx, msgs, tools, gen)
	if err != nil {
		return "", err
	}
	if t.bos != "" {
		s = strings.TrimPrefix(s, t.bos)
	}
	return s, nil
}

// RenderPrompt wraps a raw completion prompt (OpenAI /v1/completions,
// Ollama /api/generate with raw or a system field) as a manifest: no chat
// formatting when raw (the system text, when given, is a stable system
// segment before the volatile prompt; both are the caller's own rendering,
// so every control marker in them is marked a control span); otherwise the system and the prompt
// are rendered as a system and a user message.
func (t *Template) RenderPrompt(system, prompt string, raw bool) (policy.Manifest, error) {
	if !raw {
		var msgs []Message
		if system != "" {
			msgs = append(msgs, Message{Role: RoleSystem, Content: system})
		}
		return t.Render(append(msgs, Message{Role: RoleUser, Content: prompt}), nil)
	}
	if !utf8.ValidString(system) || !utf8.ValidString(prompt) {
		return policy.Manifest{}, fmt.Errorf("%w: prompt is not valid UTF-8", ErrMessages)
	}
	var segs []policy.Segment
	if system != "" {
		segs = append(segs, policy.Segment{ID: idSystem, Kind: policy.KindSystem, Class: policy.ClassTaskPinned, Text: system, Stable: true})
	}
	if prompt != "" || len(segs) == 0 {
		segs = append(segs, policy.Segment{ID: idPrompt, Kind: policy.KindUserTurn, Text: prompt})
	}
	for i := range segs {
		t.markRaw(&segs[i])
	}
	return policy.Manifest{Segments: segs, Template: "raw"}, nil
}

// checkMessages rejects roles no template knows and text that is not UTF-8.
func checkMessages(msgs []Message, tools []Tool) error {
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		default:
			return fmt.Errorf("%w: message %d: unknown role %q", ErrMessages, i, m.Role)
		}
		if !utf8.ValidString(m.Content) || !utf8.ValidString(m.Reasoning) {
			return fmt.Errorf("%w: message %d: text is not valid UTF-8", ErrMessages, i)
		}
	}
	for i, tl := range tools {
		if tl.Name == "" {
			return fmt.Errorf("%w: tool %d has no name", ErrMessages, i)
		}
	}
	return nil
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// markerFloor moves a cut at i in s back to the start of the control
// marker it falls in (e.g. "[INST]" in "...</s>[INST]", when the renderings
// compared depart after the "["), then to the start of its rune. Cuts found
// as where two renderings depart would otherwise split the marker both
// share the start of.
func (t *Template) markerFloor(s string, i int) int {
	for _, m := range t.markers {
		lo := max(0, i-len(m)+1)
		if j := strings.Index(s[lo:min(len(s), i+len(m)-1)], m); j >= 0 && lo+j < i {
			i = lo + j
		}
	}
	return runeFloor(s, i)
}

// endFloor moves a cut at i back to just after the last end-of-turn marker
// (a stop string, and the newlines after it) in s[lo:i], when there is one:
// where two renderings depart, they may already share the header of the
// next message ("<|im_start|>" or "<|im_start|>user\n"), which belongs to
// the next segment.
func (t *Template) endFloor(s string, lo, i int) int {
	if lo >= i {
		return i
	}
	best := -1
	for _, m := range t.stops {
		if j := strings.LastIndex(s[lo:i], m); j >= 0 {
			best = max(best, lo+j+len(m))
		}
	}
	if best < 0 {
		return i
	}
	for best < i && s[best] == '\n' {
		best++
	}
	return best
}

// runeFloor moves i back to the start of the rune it falls in.
func runeFloor(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}
