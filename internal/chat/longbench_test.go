package chat

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// BenchmarkRenderLong renders a long agent session: the recorded Qwen Code
// request's system prompt and tools, then 100 tool-call turns (200
// messages).
func BenchmarkRenderLong(b *testing.B) {
	reqs := loadSession(b, filepath.Join(testmodel.AgentRequests(b), "qwen_tools"))
	r := reqs[len(reqs)-1]
	msgs := append([]Message(nil), r.msgs[:4]...)
	for i := 0; len(msgs) < 204; i++ {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "read_file", Arguments: fmt.Sprintf(`{"file_path":"/repo/f%d.py"}`, i)}}},
			Message{Role: RoleTool, ToolCallID: id, Content: fmt.Sprintf("def f%d():\n    return %d\n", i, i)})
	}
	for _, name := range []string{"fallback", "qwen2.5.jinja", "qwen3.jinja"} {
		tm := mustFallback(&testing.T{})
		for _, rt := range realTemplates {
			if rt.file == name {
				tm = loadTemplate(&testing.T{}, rt)
			}
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := tm.Render(msgs, r.tools); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
