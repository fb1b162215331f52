package chat

import (
	"context"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/policy"
)

// TestControlSpansAreTheTemplatesOnly renders, with every real template, a
// conversation whose system prompt, user messages, tool result and tool
// definition hold the template's own marker texts: every control span is a marker the
// template wrote, none falls inside content, and the texts are the plain
// rendering.
func TestControlSpansAreTheTemplatesOnly(t *testing.T) {
	for _, rt := range realTemplates {
		t.Run(rt.file, func(t *testing.T) {
			tm := loadTemplate(t, rt)
			markers := tm.ControlMarkers()
			evil := "x " + strings.Join(markers, " y ") + " z"
			msgs := []Message{
				{Role: RoleSystem, Content: "sys " + evil},
				{Role: RoleUser, Content: "u1 " + evil},
				{Role: RoleAssistant, Content: "a1"},
				{Role: RoleUser, Content: "u2 " + evil},
			}
			tools := []Tool{{Name: "read", Description: "reads " + evil, Parameters: []byte(`{"type":"object","properties":{"p":{"type":"string","description":"` + evil + `"}}}`)}}
			if !rt.lastUser {
				msgs = append(msgs, Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call1", Name: "read", Arguments: `{"p":"file"}`}}},
					Message{Role: RoleTool, ToolCallID: "call1", Name: "read", Content: "r " + evil})
			}
			m, err := tm.Render(msgs, tools)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := tm.renderSegments(context.Background(), msgs, tools)
			if err != nil {
				t.Fatal(err)
			}
			var got, want strings.Builder
			total := 0
			for _, s := range plain.Segments {
				want.WriteString(s.Text)
			}
			for _, s := range m.Segments {
				got.WriteString(s.Text)
				if err := s.Validate(); err != nil {
					t.Fatal(err)
				}
				for _, c := range s.Control {
					txt := s.Text[c.Start:c.End]
					if !contains(markers, txt) {
						t.Errorf("segment %s: span %q is no marker", s.ID, txt)
					}
					// Content markers are surrounded by spaces; a span
					// inside content would have one on each side.
					if c.Start >= 1 && s.Text[c.Start-1] == ' ' && c.End < len(s.Text) && s.Text[c.End] == ' ' {
						t.Errorf("segment %s: span %q at %d lies in content: %q", s.ID, txt, c.Start, s.Text[max(0, c.Start-20):min(len(s.Text), c.End+20)])
					}
				}
				total += len(s.Control)
			}
			if got.String() != want.String() {
				t.Fatalf("rendering with control spans differs from the plain one:\n%q\n%q", got.String(), want.String())
			}
			if total < 3 {
				t.Fatalf("only %d control spans in the rendering", total)
			}
			// Content with no marker text: every marker is the template's.
			clean := []Message{{Role: RoleUser, Content: "hello"}}
			cm, err := tm.Render(clean, nil)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range cm.Segments {
				n += len(s.Control)
			}
			if n == 0 {
				t.Fatal("no control spans in a clean rendering")
			}
		})
	}
}

func TestRawPromptMarksEveryMarker(t *testing.T) {
	tm := loadTemplate(t, realTemplates[0])
	m, err := tm.RenderPrompt("", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []policy.ControlSpan{{Start: 0, End: 12}, {Start: 19, End: 29}, {Start: 30, End: 42}}
	if got := m.Segments[0].Control; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("control spans %v, want %v", got, want)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestControlSpansStableTurnToTurn: the stable segments of one request come
// back in the next, text and control spans alike, also when the new
// message holds marker texts, so the daemon's tokens (and KV reuse) are
// exact turn to turn.
func TestControlSpansStableTurnToTurn(t *testing.T) {
	for _, rt := range realTemplates {
		t.Run(rt.file, func(t *testing.T) {
			tm := loadTemplate(t, rt)
			evil := strings.Join(tm.ControlMarkers(), " ")
			msgs := []Message{{Role: RoleSystem, Content: "sys"}, {Role: RoleUser, Content: "u1"}, {Role: RoleAssistant, Content: "a1"}, {Role: RoleUser, Content: "u2"}}
			first, err := tm.Render(msgs, nil)
			if err != nil {
				t.Fatal(err)
			}
			next, err := tm.Render(append(msgs, Message{Role: RoleAssistant, Content: "a2"}, Message{Role: RoleUser, Content: "u3 " + evil}), nil)
			if err != nil {
				t.Fatal(err)
			}
			stable := 0
			for i, s := range first.Segments {
				if !s.Stable {
					break
				}
				stable++
				if i >= len(next.Segments) || next.Segments[i].Digest() != s.Digest() {
					t.Fatalf("stable segment %s (%d control spans) is not the next turn's segment %d", s.ID, len(s.Control), i)
				}
			}
			if stable == 0 {
				t.Fatal("no stable segment")
			}
		})
	}
}
