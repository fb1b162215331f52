package main

import (
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/chat"
)

func TestPerturbChangesOnlyWhatItSays(t *testing.T) {
	msgs := []chat.Message{{Role: "system", Content: "You are opencode.\n<env>\nToday's date: Tue Dec 01 2026\n</env>"}, {Role: "user", Content: "hi"}}
	tools := []chat.Tool{{Name: "read"}, {Name: "bash"}}
	m, tl, ok := perturb("date", msgs, tools)
	if !ok || !strings.Contains(m[0].Content, "Wed Dec 02 2026") || strings.Contains(m[0].Content, "Tue Dec 01") || m[1].Content != msgs[1].Content || len(tl) != 2 {
		t.Fatalf("date: %q", m[0].Content)
	}
	if msgs[0].Content != "You are opencode.\n<env>\nToday's date: Tue Dec 01 2026\n</env>" {
		t.Fatal("perturb changed its input")
	}
	if m, _, ok := perturb("agents", msgs, tools); !ok || !strings.Contains(m[0].Content, "AGENTS.md") {
		t.Fatal("agents block not added")
	}
	if _, tl, ok := perturb("tools", msgs, tools); !ok || len(tl) != 1 || tl[0].Name != "read" {
		t.Fatalf("tools: %v", tl)
	}
	if _, _, ok := perturb("tools", msgs, tools[:1]); ok {
		t.Fatal("a single tool cannot lose one")
	}
	if _, _, ok := perturb("nonsense", msgs, tools); ok {
		t.Fatal("unknown perturbation applied")
	}
}

func TestRecordedChatReadsContentParts(t *testing.T) {
	body := []byte(`{"messages":[{"role":"developer","content":[{"type":"text","text":"sys "},{"type":"text","text":"prompt"}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]}],
		"tools":[{"type":"function","function":{"name":"read","description":"reads","parameters":{"type":"object"}}}]}`)
	msgs, tools, err := recordedChat(body)
	if err != nil {
		t.Fatal(err)
	}
	if msgs[0].Role != "system" || msgs[0].Content != "sys prompt" || msgs[1].ToolCalls[0].Arguments != `{"path":"a"}` || tools[0].Name != "read" {
		t.Fatalf("%+v %+v", msgs, tools)
	}
}
