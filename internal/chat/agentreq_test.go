package chat

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

// recorded is one request of ../shared/agent-requests, as the HTTP door
// normalizes it.
type recorded struct {
	file  string
	raw   []json.RawMessage // the messages as sent
	msgs  []Message
	tools []Tool
}

// wireMessage is an OpenAI chat message.
type wireMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCallID       string          `json:"tool_call_id"`
	Name             string          `json:"name"`
	ToolCalls        []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// textContent joins a content string or an array of text parts.
func textContent(t testing.TB, raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		t.Fatalf("content %s: %v", raw, err)
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// loadSession reads one recorded session folder, in request order.
func loadSession(t testing.TB, dir string) []recorded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no requests (%v)", dir, err)
	}
	num := func(f string) int { n, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".json")); return n }
	sort.Slice(files, func(i, j int) bool { return num(files[i]) < num(files[j]) })
	var out []recorded
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var req struct {
			Body struct {
				Messages []json.RawMessage `json:"messages"`
				Tools    []struct {
					Function struct {
						Name        string          `json:"name"`
						Description string          `json:"description"`
						Parameters  json.RawMessage `json:"parameters"`
					} `json:"function"`
				} `json:"tools"`
			} `json:"body"`
		}
		if err := json.Unmarshal(data, &req); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		r := recorded{file: f, raw: req.Body.Messages}
		for _, rm := range req.Body.Messages {
			var w wireMessage
			if err := json.Unmarshal(rm, &w); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			m := Message{Role: w.Role, Content: textContent(t, w.Content), Reasoning: w.ReasoningContent, ToolCallID: w.ToolCallID, Name: w.Name}
			for _, c := range w.ToolCalls {
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
			}
			r.msgs = append(r.msgs, m)
		}
		for _, tl := range req.Body.Tools {
			r.tools = append(r.tools, Tool{Name: tl.Function.Name, Description: tl.Function.Description, Parameters: tl.Function.Parameters})
		}
		out = append(out, r)
	}
	return out
}

// mainRequests keeps a session's main requests: those with the most tools
// (side requests, title, memory extraction, sub-agents, carry fewer).
func mainRequests(reqs []recorded) []recorded {
	most := 0
	for _, r := range reqs {
		most = max(most, len(r.tools))
	}
	var out []recorded
	for _, r := range reqs {
		if len(r.tools) == most {
			out = append(out, r)
		}
	}
	return out
}

// Every recorded agent session, rendered with every real template and the
// fallback: each main request's manifest joins to the rendering, and its
// stable segments are kept byte for byte by the next main request, which
// extends it (previous messages identical, then the reply, then the new
// message). Side requests render too.
func TestRecordedAgentRequests(t *testing.T) {
	root := testmodel.AgentRequests(t)
	sessions, err := filepath.Glob(filepath.Join(root, "*"))
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]*Template{"fallback": mustFallback(t)}
	fresh := map[string]func() *Template{"fallback": func() *Template { return mustFallback(t) }}
	lastUser := map[string]bool{}
	for _, rt := range realTemplates {
		templates[rt.file] = loadTemplate(t, rt)
		fresh[rt.file] = func() *Template { return loadTemplate(t, rt) }
		lastUser[rt.file] = rt.lastUser
	}
	for _, dir := range sessions {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			continue
		}
		reqs := loadSession(t, dir)
		mains := mainRequests(reqs)
		for name, tm := range templates {
			t.Run(filepath.Base(dir)+"/"+name, func(t *testing.T) {
				for _, r := range reqs {
					// The cut-point cache changes nothing: a fresh
					// template renders the same manifest.
					if m, err := tm.Render(r.msgs, r.tools); err == nil {
						fresh, err := fresh[name]().Render(r.msgs, r.tools)
						if err != nil || !reflect.DeepEqual(m, fresh) {
							t.Fatalf("%s: a fresh template renders otherwise (%v)", r.file, err)
						}
					}
					if lastUser[name] && !alternates(r.msgs) {
						// Mistral's templates refuse this (opencode's
						// title request has two user messages in a row).
						if _, err := tm.Render(r.msgs, r.tools); !errors.Is(err, ErrTemplate) {
							t.Errorf("%s: roles do not alternate: err = %v, want ErrTemplate", r.file, err)
						}
						continue
					}
					checkManifest(t, tm, r.msgs, r.tools)
				}
				var prev *policy.Manifest
				var prevReq recorded
				for _, r := range mains {
					start := time.Now()
					m := checkManifest(t, tm, r.msgs, r.tools)
					elapsed := time.Since(start)
					if prev != nil {
						if len(r.raw) <= len(prevReq.raw) || !reflect.DeepEqual(r.raw[:len(prevReq.raw)], prevReq.raw) {
							t.Fatalf("%s does not extend %s", r.file, prevReq.file)
						}
						checkExtension(t, *prev, m, filepath.Base(r.file))
						if m.Boundary() <= prev.Boundary() && !lastUser[name] {
							t.Errorf("%s: %d stable segments, no more than the previous request's %d", r.file, m.Boundary(), prev.Boundary())
						}
					}
					total := len(joined(m))
					t.Logf("%s: %d messages, %d bytes, %d segments (%d stable, %.0f%% of the bytes), rendered in %v",
						filepath.Base(r.file), len(r.msgs), total, len(m.Segments), m.Boundary(), 100*float64(total-suffixBytes(m))/float64(total), elapsed.Round(time.Millisecond))
					prev, prevReq = &m, r
				}
			})
		}
	}
}

// alternates reports whether, after a system message, user and assistant
// messages alternate (tool calls and results aside), as Mistral wants.
func alternates(msgs []Message) bool {
	want := RoleUser
	for i, m := range msgs {
		if (i == 0 && m.Role == RoleSystem) || m.Role == RoleTool || len(m.ToolCalls) > 0 {
			continue
		}
		if m.Role != want {
			return false
		}
		if want == RoleUser {
			want = RoleAssistant
		} else {
			want = RoleUser
		}
	}
	return true
}

func mustFallback(t *testing.T) *Template {
	tm, err := NewTemplate(ModelInfo{})
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// BenchmarkRender renders the longest recorded Qwen Code request (14
// messages, 15 tools, ≈ 80k characters) with each template family.
func BenchmarkRender(b *testing.B) {
	reqs := loadSession(b, filepath.Join(testmodel.AgentRequests(b), "qwen_tools"))
	r := reqs[len(reqs)-1]
	for _, rt := range realTemplates[:6] {
		src, err := os.ReadFile(filepath.Join("testdata", rt.file))
		if err != nil {
			b.Fatal(err)
		}
		tm, err := NewTemplate(ModelInfo{ChatTemplate: string(src), BOS: rt.bos, EOS: rt.eos, Now: testClock})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(rt.file, func(b *testing.B) {
			for b.Loop() {
				if _, err := tm.Render(r.msgs, r.tools); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
