package chat

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/policy"
)

// Control spans: the renderer marks, in each segment, the control markers
// the template wrote (policy.Segment.Control), and only those; ctxd
// tokenizes the spans with the model's special tokens parsed and all other
// text as text. Marker texts inside message content or tool definitions
// stay text, so a user cannot forge a control token.
//
// How content is told apart from the template's own text: when some
// content holds a marker text, every such occurrence is replaced by a
// placeholder (ASCII letters, digits and underscores, a prefix that occurs
// nowhere in the input) before rendering; the markers found in the
// rendering are then the template's, and the texts are those of the plain
// rendering, where each placeholder is its marker's text or that text as
// tojson escapes it. A template that transforms content so that the two
// renderings do not line up that way gets no control spans for that
// conversation: its
// markers are tokenized as text, which is wrong for the model but never
// unsafe. Assumption: a template writes whole markers, never the tail of
// one right after content.

// guard replaces marker texts in content by placeholders and maps a
// rendering back.
type guard struct {
	markers []string // longest first
	first   [256]bool
	// prefix starts placeholders (prefix + marker index + "_"); "" when
	// nothing was hidden, and then a rendering holds no placeholders.
	prefix string
}

func newGuard(markers []string) *guard {
	g := &guard{markers: append([]string(nil), markers...)}
	sort.SliceStable(g.markers, func(i, j int) bool { return len(g.markers[i]) > len(g.markers[j]) })
	for _, m := range g.markers {
		g.first[m[0]] = true
	}
	return g
}

// choosePrefix picks a placeholder prefix that no input contains.
func (g *guard) choosePrefix(inputs func(func(string) bool) bool) {
	for k := 0; ; k++ {
		p := "ctxdmark" + strconv.Itoa(k) + "q"
		if !inputs(func(s string) bool { return strings.Contains(s, p) }) {
			g.prefix = p
			return
		}
	}
}

// markerAt returns the longest marker s[i:] begins with, or "".
func (g *guard) markerAt(s string, i int) string {
	if !g.first[s[i]] {
		return ""
	}
	for _, m := range g.markers {
		if strings.HasPrefix(s[i:], m) {
			return m
		}
	}
	return ""
}

// hide replaces every marker in s (leftmost, longest) by its placeholder.
func (g *guard) hide(s string) string {
	var b strings.Builder
	at := 0
	for i := 0; i < len(s); {
		m := g.markerAt(s, i)
		if m == "" {
			i++
			continue
		}
		if b.Len() == 0 {
			b.Grow(len(s) + 16)
		}
		b.WriteString(s[at:i])
		b.WriteString(g.placeholder(m))
		i += len(m)
		at = i
	}
	if at == 0 {
		return s
	}
	b.WriteString(s[at:])
	return b.String()
}

func (g *guard) placeholder(m string) string {
	for k, o := range g.markers {
		if o == m {
			return g.prefix + strconv.Itoa(k) + "_"
		}
	}
	panic("chat: placeholder of an unknown marker")
}

// placeholderAt returns the marker a placeholder at s[i:] stands for and
// the placeholder's length, or "", 0.
func (g *guard) placeholderAt(s string, i int) (string, int) {
	if g.prefix == "" || !strings.HasPrefix(s[i:], g.prefix) {
		return "", 0
	}
	j := i + len(g.prefix)
	k := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' && j-i-len(g.prefix) < 6 {
		k = 10*k + int(s[j]-'0')
		j++
	}
	if j == i+len(g.prefix) || j >= len(s) || s[j] != '_' || k >= len(g.markers) {
		return "", 0
	}
	return g.markers[k], j + 1 - i
}

// restore maps a rendering h of hidden content onto plain, the rendering
// of the same conversation with content as it is: the spans of the markers
// h holds outside placeholders, as offsets in plain, and at[i], the offset
// in plain of offset i of h (an offset inside a placeholder maps to its
// start). Between placeholders h and plain agree byte for byte; a
// placeholder stands for its marker's text or for that text as JSON
// escapes it (tojson writes "<" as \u003c). ok is false when plain does not
// follow h that way (the template transformed content).
func (g *guard) restore(h, plain string) (spans []policy.ControlSpan, at []int, ok bool) {
	at = make([]int, len(h)+1)
	j := 0 // offset in plain
	for i := 0; i < len(h); {
		if m, n := g.placeholderAt(h, i); n > 0 {
			x := ""
			for _, cand := range []string{m, jsonEscaped(m)} {
				if strings.HasPrefix(plain[j:], cand) {
					x = cand
					break
				}
			}
			if x == "" {
				return nil, nil, false
			}
			for k := 0; k < n; k++ {
				at[i+k] = j
			}
			i, j = i+n, j+len(x)
			continue
		}
		if j >= len(plain) || h[i] != plain[j] {
			return nil, nil, false
		}
		if m := g.markerAt(h, i); m != "" {
			if !strings.HasPrefix(plain[j:], m) {
				return nil, nil, false
			}
			for k := 0; k < len(m); k++ {
				at[i+k] = j + k
			}
			spans = append(spans, policy.ControlSpan{Start: j, End: j + len(m)})
			i, j = i+len(m), j+len(m)
			continue
		}
		at[i] = j
		i, j = i+1, j+1
	}
	at[len(h)] = j
	return spans, at, j == len(plain)
}

// jsonEscaped is s as a JSON encoder that escapes HTML characters writes it.
func jsonEscaped(s string) string {
	return strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`).Replace(s)
}

// hideMessages returns copies of msgs and tools with the markers in their
// content hidden.
func (g *guard) hideMessages(msgs []Message, tools []Tool) ([]Message, []Tool) {
	hm := make([]Message, len(msgs))
	for i, m := range msgs {
		m.Content, m.Reasoning, m.Name, m.ToolCallID = g.hide(m.Content), g.hide(m.Reasoning), g.hide(m.Name), g.hide(m.ToolCallID)
		if len(m.ToolCalls) > 0 {
			calls := make([]ToolCall, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				calls[j] = ToolCall{ID: g.hide(c.ID), Name: g.hide(c.Name), Arguments: g.hide(c.Arguments)}
			}
			m.ToolCalls = calls
		}
		hm[i] = m
	}
	var ht []Tool
	if tools != nil {
		ht = make([]Tool, len(tools))
		for i, tl := range tools {
			ht[i] = Tool{Name: g.hide(tl.Name), Description: g.hide(tl.Description), Parameters: json.RawMessage(g.hide(string(tl.Parameters)))}
		}
	}
	return hm, ht
}

// contentStrings calls yield with every text of msgs and tools that comes
// from the caller, and reports whether yield ever returned true.
func contentStrings(msgs []Message, tools []Tool) func(func(string) bool) bool {
	return func(yield func(string) bool) bool {
		for _, m := range msgs {
			if yield(m.Content) || yield(m.Reasoning) || yield(m.Name) || yield(m.ToolCallID) {
				return true
			}
			for _, c := range m.ToolCalls {
				if yield(c.ID) || yield(c.Name) || yield(c.Arguments) {
					return true
				}
			}
		}
		for _, tl := range tools {
			if yield(tl.Name) || yield(tl.Description) || yield(string(tl.Parameters)) {
				return true
			}
		}
		return false
	}
}

// renderControlled renders like render and marks the template's control
// markers in each segment (see the comment at the top of this file).
func (t *Template) renderControlled(ctx context.Context, msgs []Message, tools []Tool) (policy.Manifest, error) {
	if len(t.markers) == 0 {
		return t.renderSegments(ctx, msgs, tools)
	}
	inputs := contentStrings(msgs, tools)
	g := newGuard(t.markers)
	hidden := inputs(func(s string) bool { return g.hide(s) != s })
	hm, ht := msgs, tools
	if hidden {
		g.choosePrefix(inputs)
		hm, ht = g.hideMessages(msgs, tools)
	}
	m, err := t.renderSegments(ctx, hm, ht)
	if err != nil {
		return m, err
	}
	var whole strings.Builder
	for _, s := range m.Segments {
		whole.WriteString(s.Text)
	}
	plain := whole.String()
	if hidden {
		if plain, err = t.text(ctx, msgs, tools, true); err != nil {
			return m, err
		}
	}
	spans, at, ok := g.restore(whole.String(), plain)
	if !ok {
		// The template did not carry the placeholders through: no
		// control spans (markers tokenized as text).
		return t.renderSegments(ctx, msgs, tools)
	}
	text := plain
	off := 0
	for i := range m.Segments {
		s := &m.Segments[i]
		from, to := at[off], at[off+len(s.Text)]
		off += len(s.Text)
		s.Text = text[from:to]
		s.Control = nil
		for _, c := range spans {
			if c.Start >= from && c.End <= to {
				s.Control = append(s.Control, policy.ControlSpan{Start: c.Start - from, End: c.End - from})
			}
		}
	}
	return m, nil
}

// markRaw marks every control marker of a raw prompt's text: a raw prompt
// is the caller's own rendering, template markers included.
func (t *Template) markRaw(s *policy.Segment) {
	if len(t.markers) == 0 {
		return
	}
	g := newGuard(t.markers)
	for i := 0; i < len(s.Text); {
		if m := g.markerAt(s.Text, i); m != "" {
			s.Control = append(s.Control, policy.ControlSpan{Start: i, End: i + len(m)})
			i += len(m)
			continue
		}
		i++
	}
}
