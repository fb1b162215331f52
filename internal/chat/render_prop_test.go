package chat

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// randomConversation draws a conversation of n messages: an optional
// system prompt, then user, assistant (text, reasoning or tool calls) and
// tool messages in any order when wild, else in the order agents send them.
func randomConversation(r *rand.Rand, n int, wild bool) []Message {
	texts := []string{"hi", "List the files", "ok\n", "", "é ü 日本", "<tool_call>not a call</tool_call>", "{\"a\": 1}", "line1\nline2"}
	text := func() string { return texts[r.IntN(len(texts))] }
	var msgs []Message
	if r.IntN(3) > 0 {
		msgs = append(msgs, Message{Role: RoleSystem, Content: "You are an agent. " + text()})
	}
	next := RoleUser
	for len(msgs) < n {
		role := next
		if wild {
			role = []string{RoleSystem, RoleUser, RoleAssistant, RoleTool}[r.IntN(4)]
		}
		m := Message{Role: role, Content: text()}
		if role == RoleUser && !wild {
			// Mistral Nemo's template finds "the last user message" by
			// equality: a repeated user message moves its tools.
			m.Content += fmt.Sprintf(" (turn %d)", len(msgs))
		}
		switch role {
		case RoleAssistant:
			if r.IntN(3) == 0 {
				m.Reasoning = "thinking " + text()
			}
			if r.IntN(2) == 0 {
				id := fmt.Sprintf("call_%d", len(msgs))
				m.ToolCalls = []ToolCall{{ID: id, Name: "ls", Arguments: `{"dir":"` + fmt.Sprint(r.IntN(9)) + `"}`}}
				next = RoleTool
			} else {
				next = RoleUser
			}
		case RoleTool:
			if len(msgs) > 0 && len(msgs[len(msgs)-1].ToolCalls) > 0 {
				prev := msgs[len(msgs)-1]
				m.ToolCallID = prev.ToolCalls[0].ID
			} else {
				m.ToolCallID = "call_x"
			}
			m.Name = "ls"
			next = RoleAssistant
		case RoleUser:
			next = RoleAssistant
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// Random conversations, also ones no agent sends: every template either
// renders a valid manifest that joins to its rendering or refuses with
// ErrTemplate or ErrMessages; never a panic. Conversations in agent order
// keep their stable segments turn to turn.
func TestRenderRandomConversations(t *testing.T) {
	templates := []*Template{mustFallback(t)}
	for _, rt := range realTemplates {
		templates = append(templates, loadTemplate(t, rt))
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, tm := range templates {
		for i := 0; i < 100; i++ {
			msgs := randomConversation(r, 1+r.IntN(9), true)
			tools := testTools[:r.IntN(len(testTools)+1)]
			if _, err := tm.Render(msgs, tools); err != nil {
				if !errors.Is(err, ErrTemplate) && !errors.Is(err, ErrMessages) {
					t.Fatalf("%s: %v", tm.Name(), err)
				}
				continue
			}
			checkManifest(t, tm, msgs, tools)
		}
		for i := 0; i < 40; i++ {
			msgs := randomConversation(r, 2+r.IntN(10), false)
			if _, err := tm.Render(msgs, testTools); err != nil {
				continue // e.g. Mistral: a tool result right after the system prompt
			}
			checkConversation(t, tm, msgs, testTools)
		}
	}
}
