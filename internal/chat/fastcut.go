package chat

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// The cut points of a long conversation in time linear in its length.
//
// prefixBounds renders every prefix messages[:k] to find where it ends in
// the full rendering: a first rendering of N messages costs N renderings
// of up to N messages. fastBounds renders the conversation once more with a
// unique mark at the start of each message's text (its content and its
// first tool call's name), strips the marks, checks that
// what is left is the full rendering byte for byte and so learns where
// each message's text starts in it. Every boundary k (between messages k-1
// and k) gets a shape: the two messages' roles and kinds and where they
// sit (first, last, before or after the last user message). The first
// boundary of each shape is cut the prefix way (cut, the same function
// prefixBounds calls); it gives the shape's header, the text from the cut
// to message k's mark. Every later boundary of that shape whose text
// before its mark is that same header is cut there; one whose text is not
// is cut the prefix way. The middle and the last boundary of each shape
// are cut the prefix way as well and must agree with the header's
// answer; if one does not, or the rendering cannot be marked (a template
// that rewrites text, text holding a mark or a stop string), or more than
// fastCutMaxChecks prefix cuts would be needed, the whole conversation is
// cut by prefixes. A message none of whose marks was written (no text at
// all), or whose start is unsure, is cut the prefix way. A template whose cuts depend on
// a message's text, not its shape, disagrees with its own samples and
// falls back; the property tests compare both methods on random
// conversations and recorded agent requests for every shipped template.

// fastCutMinMessages: shorter conversations are cut by prefixes, which
// costs little there.
const fastCutMinMessages = 32

// fastCutMaxMisses: a conversation whose prefixes the cut cache holds
// but for this many is cut by prefixes (a later turn of a conversation
// already cut: only its new messages are rendered).
const fastCutMaxMisses = 8

// fastCutMaxChecks bounds the prefix cuts one fast pass makes (each
// renders up to the whole conversation once or twice); past it the
// conversation is cut by prefixes.
const fastCutMaxChecks = 96

// cutMarkTag starts a mark: plain ASCII, which JSON filters write as is.
const cutMarkTag = "~~ctxd-cut-"

// cutMark marks message i's content (kind 'c') or first tool call ('t').
func cutMark(i int, kind byte) string { return cutMarkTag + strconv.Itoa(i) + string(kind) + "~~" }

// fastBounds returns bounds as prefixBounds would, ok false when this
// conversation cannot be cut the fast way (see above).
func (t *Template) fastBounds(ctx context.Context, msgs []Message, tools []Tool, full string) ([]int, bool, error) {
	b, _, ok, err := t.fastCuts(ctx, msgs, tools, full)
	return b, ok, err
}

// fastCuts is fastBounds, with the number of boundaries cut by their
// shape's header (not the prefix way).
func (t *Template) fastCuts(ctx context.Context, msgs []Message, tools []Tool, full string) (bounds []int, byShape int, ok bool, err error) {
	n := len(msgs)
	if !t.markable(msgs, tools) {
		return nil, 0, false, nil
	}
	// Empty texts are marked too when the template lays them out as any
	// other (ChatML); a template that tests for them (Qwen 2.5 writes a
	// tool call's empty content as nothing) is asked again without. A
	// mark goes before a text's leading white space, or, for a template
	// that trims it (Llama 3), after.
	var anchors []int
	for _, a := range []struct{ empties, afterSpace bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		out, err := t.text(ctx, markMessages(msgs, a.empties, a.afterSpace), tools, true)
		if transient(err) {
			return nil, 0, false, err
		}
		if err != nil {
			continue
		}
		if anchors, ok = findMarks(out, full, msgs, a.afterSpace); ok {
			break
		}
	}
	if !ok {
		return nil, 0, false, nil
	}
	shapes := boundaryShapes(msgs)
	sampled := sampleBoundaries(shapes)
	type rep struct {
		none   bool   // the shape has no cut point
		header string // full[cut:anchor]
		bad    bool   // the cut was not before the mark: every boundary is cut the prefix way
	}
	reps := make(map[string]rep)
	keys := prefixKeys(msgs, tools)
	ph := &prefixHasher{s: full}
	bounds = make([]int, n+1)
	last, checks := 0, 0
	prefixCut := func(k int) (int, bool, error) {
		if checks++; checks > fastCutMaxChecks {
			return 0, false, nil
		}
		b, err := t.cut(ctx, msgs, k, tools, full, last, keys[k], ph)
		return b, err == nil, err
	}
	for k := 0; k <= n; k++ {
		if k%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, false, fmt.Errorf("%w: %w", ErrCancelled, context.Cause(ctx))
			}
		}
		b, predicted := -1, false
		r, seen := reps[shapes[k]]
		inner := k > 0 && k < n && anchors[k] >= 0
		if seen && !r.bad && inner {
			if r.none {
				predicted = true
			} else if c := anchors[k] - len(r.header); c > last && strings.HasPrefix(full[c:], r.header) {
				b, predicted = c, true
			}
		}
		if !predicted || sampled[k] || !inner {
			got, ok, err := prefixCut(k)
			if err != nil || !ok {
				return nil, 0, false, err
			}
			if predicted && got != b {
				return nil, 0, false, nil // the shape's rule does not hold here
			}
			b = got
			if !seen && inner {
				switch {
				case b < 0:
					reps[shapes[k]] = rep{none: true}
				case b > anchors[k]:
					reps[shapes[k]] = rep{bad: true}
				default:
					reps[shapes[k]] = rep{header: full[b:anchors[k]]}
				}
			}
		}
		if predicted && !sampled[k] {
			byShape++
		}
		bounds[k] = b
		if b >= 0 {
			last = b
		}
	}
	return bounds, byShape, true, nil
}

// markable reports that no text of msgs and tools holds a mark already,
// nor does a message's text hold one of the template's stop strings:
// where the prefix way cuts a message that the template renders apart
// when it comes last depends on the last stop string before it
// (endFloor), so a message holding one may be cut inside its text, where
// its shape's header does not say.
func (t *Template) markable(msgs []Message, tools []Tool) bool {
	has := func(s string) bool { return strings.Contains(s, cutMarkTag) }
	forged := func(s string) bool {
		for _, m := range t.stops {
			if strings.Contains(s, m) {
				return true
			}
		}
		return false
	}
	for _, tl := range tools {
		if has(tl.Name) || has(tl.Description) || has(string(tl.Parameters)) {
			return false
		}
	}
	for _, m := range msgs {
		if has(m.Content) || has(m.Reasoning) || has(m.ToolCallID) || has(m.Name) || forged(m.Content) || forged(m.Reasoning) {
			return false
		}
		for _, c := range m.ToolCalls {
			if has(c.ID) || has(c.Name) || has(c.Arguments) || forged(c.Arguments) {
				return false
			}
		}
	}
	return true
}

// markMessages returns msgs with a mark at the start of each one's
// content (an empty one too when empties; after its leading white space
// when afterSpace) and of its first tool call's name.
func markMessages(msgs []Message, empties, afterSpace bool) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if m.Content != "" || empties {
			ws := 0
			if afterSpace {
				ws = leadingSpace(m.Content)
			}
			m.Content = m.Content[:ws] + cutMark(i, 'c') + m.Content[ws:]
		}
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = append([]ToolCall(nil), m.ToolCalls...)
			m.ToolCalls[0].Name = cutMark(i, 't') + m.ToolCalls[0].Name
		}
		out[i] = m
	}
	return out
}

// leadingSpace is the length of s's leading white space.
func leadingSpace(s string) int { return len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace)) }

// findMarks strips the marks of msgs from out and returns where each
// message's first mark was in what is left (-1: none of its marks was
// written, or, marked after its leading white space, that white space
// may have been written: where the message starts is then unsure), with
// anchors[n] = len(full); ok only when no mark appears twice and what is
// left is full.
func findMarks(out, full string, msgs []Message, afterSpace bool) ([]int, bool) {
	n := len(msgs)
	unsure := make([]bool, n)
	anchors := make([]int, n+1)
	for i := range anchors {
		anchors[i] = -1
	}
	seen := make(map[string]bool)
	var b strings.Builder
	b.Grow(len(full))
	for {
		j := strings.Index(out, cutMarkTag)
		if j < 0 {
			b.WriteString(out)
			break
		}
		b.WriteString(out[:j])
		rest := out[j+len(cutMarkTag):]
		end := strings.Index(rest, "~~")
		if end < 2 {
			return nil, false
		}
		id, kind := rest[:end-1], rest[end-1]
		i, err := strconv.Atoi(id)
		if err != nil || i < 0 || i >= n || id != strconv.Itoa(i) || (kind != 'c' && kind != 't') || seen[rest[:end]] {
			return nil, false
		}
		seen[rest[:end]] = true
		if anchors[i] < 0 || b.Len() < anchors[i] {
			anchors[i] = b.Len()
		}
		if kind == 'c' && afterSpace && leadingSpace(msgs[i].Content) > 0 {
			unsure[i] = true
		}
		out = rest[end+2:]
	}
	if b.String() != full {
		return nil, false
	}
	for i := range n {
		if unsure[i] {
			anchors[i] = -1 // cut the prefix way
		}
	}
	anchors[n] = len(full)
	return anchors, true
}

// boundaryShapes returns the shape of each boundary k (0..n): what a
// template may look at to lay out the end of message k-1 and the start of
// message k. Boundaries 0 and n have shapes of their own.
func boundaryShapes(msgs []Message) []string {
	n := len(msgs)
	lastUser := -1
	for i, m := range msgs {
		if m.Role == RoleUser {
			lastUser = i
		}
	}
	shape := func(i int) string {
		m := msgs[i]
		var b strings.Builder
		b.WriteString(m.Role)
		b.WriteByte('/')
		b.WriteString(strconv.Itoa(len(m.ToolCalls)))
		flag := func(c bool, f byte) {
			if c {
				b.WriteByte(f)
			}
		}
		flag(m.Content == "", 'e')
		flag(m.Reasoning != "", 'r')
		flag(m.ToolCallID != "", 'i')
		flag(m.Name != "", 'n')
		flag(i == 0, 'F')
		flag(i == n-1, 'L')
		flag(i == lastUser, 'U')
		flag(i > lastUser, 'A')
		return b.String()
	}
	shapes := make([]string, n+1)
	shapes[0], shapes[n] = "start", "end"
	for k := 1; k < n; k++ {
		shapes[k] = shape(k-1) + "|" + shape(k)
	}
	return shapes
}

// sampleBoundaries marks the boundaries cut the prefix way besides each
// shape's first: its middle and last.
func sampleBoundaries(shapes []string) []bool {
	at := make(map[string][]int)
	for k, s := range shapes {
		at[s] = append(at[s], k)
	}
	sampled := make([]bool, len(shapes))
	for _, ks := range at {
		sampled[ks[len(ks)/2]] = true
		sampled[ks[len(ks)-1]] = true
	}
	return sampled
}
