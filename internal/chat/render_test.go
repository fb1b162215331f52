package chat

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/policy"
)

var testTools = []Tool{
	{Name: "read_file", Description: "Read a file.", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
	{Name: "ls", Description: "List a folder.", Parameters: []byte(`{"type":"object","properties":{"dir":{"type":"string"}}}`)},
}

// conversation is a session of the kind agents send: a system prompt, a
// user turn answered by a tool call, its result, a reply and a new turn.
var conversation = []Message{
	{Role: RoleSystem, Content: "You are a coding agent."},
	{Role: RoleUser, Content: "List the files in this folder"},
	{Role: RoleAssistant, Reasoning: "I should list.", ToolCalls: []ToolCall{{ID: "call_1", Name: "ls", Arguments: `{"dir":"."}`}}},
	{Role: RoleTool, ToolCallID: "call_1", Name: "ls", Content: "main.py\nREADME.md"},
	{Role: RoleAssistant, Content: "Two files: main.py and README.md."},
	{Role: RoleUser, Content: "Read main.py"},
	{Role: RoleAssistant, Content: "Done."},
	{Role: RoleUser, Content: "Thanks"},
}

// joined is the concatenation of m's segment texts.
func joined(m policy.Manifest) string {
	var b strings.Builder
	for _, s := range m.Segments {
		b.WriteString(s.Text)
	}
	return b.String()
}

// checkManifest checks the invariants of one rendering: a valid manifest
// whose text is the full rendering.
func checkManifest(t *testing.T, tm *Template, msgs []Message, tools []Tool) policy.Manifest {
	t.Helper()
	m, err := tm.Render(msgs, tools)
	if err != nil {
		t.Fatalf("Render(%d messages): %v", len(msgs), err)
	}
	if err := m.Validate(); err != nil {
		t.Fatalf("Render(%d messages): %v", len(msgs), err)
	}
	full, err := tm.text(context.Background(), msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := joined(m); got != full {
		t.Fatalf("Render(%d messages): segments join to\n%q\nwant\n%q", len(msgs), got, full)
	}
	if m.Template != tm.Name() {
		t.Errorf("manifest template %q, want %q", m.Template, tm.Name())
	}
	return m
}

// checkExtension checks that every stable segment of prev is in next, the
// same bytes at the same place.
func checkExtension(t *testing.T, prev, next policy.Manifest, what string) {
	t.Helper()
	for i, s := range prev.StablePrefix() {
		if i >= len(next.Segments) || next.Segments[i].Text != s.Text || next.Segments[i].ID != s.ID {
			var got string
			if i < len(next.Segments) {
				got = next.Segments[i].Text
			}
			t.Fatalf("%s: stable segment %d (%s) not kept:\nwas  %q\nnow  %q", what, i, s.ID, s.Text, got)
		}
	}
}

// checkConversation renders every prefix of msgs that ends before a reply
// and checks the manifest invariants and that each request's stable
// segments are kept by the next.
func checkConversation(t *testing.T, tm *Template, msgs []Message, tools []Tool) {
	t.Helper()
	var prev *policy.Manifest
	for n := 1; n <= len(msgs); n++ {
		if msgs[n-1].Role == RoleAssistant || msgs[n-1].Role == RoleSystem {
			continue
		}
		m := checkManifest(t, tm, msgs[:n], tools)
		if prev != nil {
			checkExtension(t, *prev, m, tm.Name())
		}
		prev = &m
	}
}

func TestFallbackRender(t *testing.T) {
	tm, err := NewTemplate(ModelInfo{EOS: "</s>", BOS: "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	if tm.Name() != "fallback" {
		t.Fatalf("Name() = %q", tm.Name())
	}
	if got := tm.StopStrings(); len(got) != 2 || got[0] != "<|im_end|>" || got[1] != "</s>" {
		t.Fatalf("StopStrings() = %q", got)
	}
	m := checkManifest(t, tm, conversation[:4], testTools)
	want := []struct {
		id     string
		kind   policy.SegmentKind
		stable bool
	}{
		{"system", policy.KindSystem, true},
		{"tools", policy.KindTools, true},
		{"msg-1", policy.KindUserTurn, true},
		{"msg-2", policy.KindUserTurn, true},
		{"msg-3", policy.KindTerminal, false},
		{"gen", policy.KindUserTurn, false},
	}
	if len(m.Segments) != len(want) {
		t.Fatalf("%d segments, want %d: %+v", len(m.Segments), len(want), m.Segments)
	}
	for i, w := range want {
		s := m.Segments[i]
		if s.ID != w.id || s.Kind != w.kind || s.Stable != w.stable {
			t.Errorf("segment %d = {%s %s stable=%v}, want {%s %s stable=%v}", i, s.ID, s.Kind, s.Stable, w.id, w.kind, w.stable)
		}
	}
	if s := m.Segments[0]; s.Text != "<|im_start|>system\nYou are a coding agent." || s.EffectiveClass() != policy.ClassTaskPinned {
		t.Errorf("system segment %q class %s", s.Text, s.EffectiveClass())
	}
	if s := m.Segments[5]; s.Text != "<|im_start|>assistant\n" {
		t.Errorf("gen segment %q", s.Text)
	}
	if !strings.Contains(m.Segments[3].Text, `<tool_call>`+"\n"+`{"name": "ls", "arguments": {"dir":"."}}`) {
		t.Errorf("tool call not rendered: %q", m.Segments[3].Text)
	}
	checkConversation(t, tm, conversation, testTools)
	checkConversation(t, tm, conversation[1:], nil)
}

func TestRenderErrors(t *testing.T) {
	tm, _ := NewTemplate(ModelInfo{})
	for name, msgs := range map[string][]Message{
		"empty":     nil,
		"role":      {{Role: "robot", Content: "x"}},
		"utf8":      {{Role: RoleUser, Content: "\xff"}},
		"arguments": {{Role: RoleUser, Content: "x"}, {Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "ls", Arguments: "{"}}}, {Role: RoleUser, Content: "y"}},
	} {
		if _, err := tm.Render(msgs, nil); !errors.Is(err, ErrMessages) {
			t.Errorf("%s: err = %v, want ErrMessages", name, err)
		}
	}
	if _, err := NewTemplate(ModelInfo{ChatTemplate: "{% if %}"}); !errors.Is(err, ErrTemplate) {
		t.Errorf("bad template: err = %v, want ErrTemplate", err)
	}
}

func TestRenderPrompt(t *testing.T) {
	tm, _ := NewTemplate(ModelInfo{})
	m, err := tm.RenderPrompt("sys", "Once upon a time", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if joined(m) != "sysOnce upon a time" || !m.Segments[0].Stable || m.Segments[1].Stable {
		t.Fatalf("raw prompt manifest %+v", m.Segments)
	}
	m, err = tm.RenderPrompt("", "Hi", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := joined(m); got != "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" {
		t.Fatalf("templated prompt %q", got)
	}
}
