package chat

import (
	"math/rand/v2"
	"strings"
	"testing"
)

var parseTools = []Tool{
	{Name: "ls", Parameters: []byte(`{"type":"object","properties":{"dir":{"type":"string"}}}`)},
	{Name: "read_file", Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"},"limit":{"type":"integer"},"opts":{"type":"object"}}}`)},
}

// parseCase is generated text and what a parser must make of it.
type parseCase struct {
	name  string
	out   string     // the model's output
	text  string     // the text the parser returns, in all
	calls []ToolCall // the calls; an empty ID accepts any generated one
}

// Calls written as each family's template teaches.
var parseCases = map[string][]parseCase{
	"hermes": {
		{"plain", "Hello, world.", "Hello, world.", nil},
		{"call", "Sure.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"dir\": \".\"}}\n</tool_call>", "Sure.\n", []ToolCall{{Name: "ls", Arguments: `{"dir":"."}`}}},
		{"two calls", "<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"a.go\", \"limit\": 3}}\n</tool_call>", "\n",
			[]ToolCall{{Name: "ls", Arguments: `{}`}, {Name: "read_file", Arguments: `{"path":"a.go","limit":3}`}}},
		{"string arguments", `<tool_call>{"name": "ls", "arguments": "{\"dir\": \"src\"}"}</tool_call>`, "", []ToolCall{{Name: "ls", Arguments: `{"dir":"src"}`}}},
		{"unclosed at the end", "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"dir\": \"<tool_call>\"}}", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"<tool_call>"}`}}},
		{"not json", "<tool_call>ls please</tool_call> then more", "<tool_call>ls please</tool_call> then more", nil},
		{"unfinished", "a < b, see <tool_call>{\"name\": \"ls\"", "a < b, see <tool_call>{\"name\": \"ls\"", nil},
		{"opener prefix at the end", "x <tool_c", "x <tool_c", nil},
		{"call then text", "<tool_call>{\"name\":\"ls\",\"arguments\":{}}</tool_call>done <b>", "done <b>", []ToolCall{{Name: "ls", Arguments: `{}`}}},
	},
	"qwen3-coder": {
		{"call", "I will read it.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.go\n</parameter>\n<parameter=limit>\n20\n</parameter>\n</function>\n</tool_call>", "I will read it.\n",
			[]ToolCall{{Name: "read_file", Arguments: `{"path":"src/main.go","limit":20}`}}},
		{"multi-line string", "<tool_call>\n<function=ls>\n<parameter=dir>\na\nb\n</parameter>\n</function>\n</tool_call>", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"a\nb"}`}}},
		{"object value", "<tool_call>\n<function=read_file>\n<parameter=opts>\n{\"a\": 1}\n</parameter>\n<parameter=limit>\nmany\n</parameter>\n</function>\n</tool_call>", "",
			[]ToolCall{{Name: "read_file", Arguments: `{"opts":{"a":1},"limit":"many"}`}}},
		{"no wrapper", "<function=ls>\n<parameter=dir>\n.\n</parameter>\n</function>", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"."}`}}},
		{"no parameters", "<tool_call>\n<function=ls>\n</function>\n</tool_call>", "", []ToolCall{{Name: "ls", Arguments: `{}`}}},
		{"hermes inside", "<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"dir\": \"x\"}}\n</tool_call>", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"x"}`}}},
		{"broken", "<tool_call>\n<function=>\n</function>\n</tool_call>!", "<tool_call>\n<function=>\n</function>\n</tool_call>!", nil},
		{"unfinished", "<tool_call>\n<function=ls>\n<parameter=dir>\n.", "<tool_call>\n<function=ls>\n<parameter=dir>\n.", nil},
	},
	"llama3": {
		{"plain", "The files are a and b.", "The files are a and b.", nil},
		{"bare", "{\"name\": \"ls\", \"parameters\": {\"dir\": \".\"}}", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"."}`}}},
		{"bare after spaces", "\n {\"type\": \"function\", \"name\": \"ls\", \"parameters\": {}}", "\n ", []ToolCall{{Name: "ls", Arguments: `{}`}}},
		{"python tag", "<|python_tag|>{\"name\": \"read_file\", \"parameters\": {\"path\": \"x\"}}", "", []ToolCall{{Name: "read_file", Arguments: `{"path":"x"}`}}},
		{"two calls", "<|python_tag|>{\"name\": \"ls\", \"parameters\": {}}; {\"name\": \"read_file\", \"parameters\": {\"path\": \"y\"}}", "",
			[]ToolCall{{Name: "ls", Arguments: `{}`}, {Name: "read_file", Arguments: `{"path":"y"}`}}},
		{"unknown tool", "{\"name\": \"rm\", \"parameters\": {}}", "{\"name\": \"rm\", \"parameters\": {}}", nil},
		{"json answer", "{\"answer\": 42}", "{\"answer\": 42}", nil},
		{"after text", "Call: {\"name\": \"ls\", \"parameters\": {}}", "Call: {\"name\": \"ls\", \"parameters\": {}}", nil},
		{"python code", "<|python_tag|>brave_search.call(query=\"x\")", "<|python_tag|>brave_search.call(query=\"x\")", nil},
		{"unfinished", "{\"name\": \"ls\", \"parameters\": {", "{\"name\": \"ls\", \"parameters\": {", nil},
	},
	"mistral": {
		{"plain", "Bonjour.", "Bonjour.", nil},
		{"v3 list", "[TOOL_CALLS][{\"name\": \"ls\", \"arguments\": {\"dir\": \".\"}, \"id\": \"abc123XYZ\"}, {\"name\": \"read_file\", \"arguments\": {\"path\": \"a\"}}]", "",
			[]ToolCall{{ID: "abc123XYZ", Name: "ls", Arguments: `{"dir":"."}`}, {Name: "read_file", Arguments: `{"path":"a"}`}}},
		{"v11 args", "[TOOL_CALLS]ls[ARGS]{\"dir\": \".\"}", "", []ToolCall{{Name: "ls", Arguments: `{"dir":"."}`}}},
		{"v11 two with ids", "[TOOL_CALLS]ls[CALL_ID]abc123XYZ[ARGS]{\"dir\":\".\"}[TOOL_CALLS]read_file[ARGS]{\"path\":\"a\"}", "",
			[]ToolCall{{ID: "abc123XYZ", Name: "ls", Arguments: `{"dir":"."}`}, {Name: "read_file", Arguments: `{"path":"a"}`}}},
		{"text first", "Let me look. [TOOL_CALLS]ls[ARGS]{}", "Let me look. ", []ToolCall{{Name: "ls", Arguments: `{}`}}},
		{"garbage", "[TOOL_CALLS] I cannot\nhelp {", "[TOOL_CALLS] I cannot\nhelp {", nil},
		{"bad list", "[TOOL_CALLS][1, 2] ok", "[TOOL_CALLS][1, 2] ok", nil},
	},
}

// templateOf returns a template of family name.
func templateOf(t *testing.T, family string) *Template {
	for _, rt := range realTemplates {
		if rt.family == family {
			return loadTemplate(t, rt)
		}
	}
	t.Fatalf("no template of family %s", family)
	return nil
}

// runParser feeds out in the given pieces and collects what comes back,
// checking that held-back text is never lost or reordered.
func runParser(p ToolParser, pieces []string) (string, []ToolCall) {
	var text strings.Builder
	var calls []ToolCall
	for _, piece := range pieces {
		s, c := p.Feed(piece)
		text.WriteString(s)
		calls = append(calls, c...)
	}
	s, c := p.Flush()
	text.WriteString(s)
	return text.String(), append(calls, c...)
}

func checkParse(t *testing.T, how string, c parseCase, text string, calls []ToolCall) {
	t.Helper()
	if text != c.text {
		t.Errorf("%s, %s: text %q, want %q", c.name, how, text, c.text)
	}
	if len(calls) != len(c.calls) {
		t.Fatalf("%s, %s: calls %+v, want %+v", c.name, how, calls, c.calls)
	}
	for i, w := range c.calls {
		g := calls[i]
		if g.Name != w.Name || g.Arguments != w.Arguments || g.ID == "" || (w.ID != "" && g.ID != w.ID) {
			t.Errorf("%s, %s: call %d = %+v, want %+v", c.name, how, i, g, w)
		}
	}
}

// Each family's parser reads its calls whole, split at every byte, and fed
// one byte at a time; what is not a call comes back as text.
func TestToolParsers(t *testing.T) {
	for family, cases := range parseCases {
		tm := templateOf(t, family)
		t.Run(family, func(t *testing.T) {
			for _, c := range cases {
				text, calls := runParser(tm.NewToolParser(parseTools), []string{c.out})
				checkParse(t, "whole", c, text, calls)
				var bytes []string
				for i := 0; i < len(c.out); i++ {
					bytes = append(bytes, c.out[i:i+1])
				}
				text, calls = runParser(tm.NewToolParser(parseTools), bytes)
				checkParse(t, "byte by byte", c, text, calls)
				for i := 1; i < len(c.out); i++ {
					text, calls = runParser(tm.NewToolParser(parseTools), []string{c.out[:i], c.out[i:]})
					checkParse(t, "split at "+string(rune('0'+i%10)), c, text, calls)
				}
			}
		})
	}
}

// Text that cannot begin a call is not held back.
func TestToolParserStreamsText(t *testing.T) {
	tm := templateOf(t, "hermes")
	p := tm.NewToolParser(parseTools)
	if s, _ := p.Feed("Hello "); s != "Hello " {
		t.Errorf("Feed(Hello ) = %q", s)
	}
	if s, _ := p.Feed("<tool"); s != "" {
		t.Errorf("Feed(<tool) = %q, want it held back", s)
	}
	if s, _ := p.Feed("box>"); s != "<toolbox>" {
		t.Errorf("Feed(box>) = %q, want the held text back", s)
	}
	// Without tools, or for a family without calls, all is text at once.
	for _, p := range []ToolParser{tm.NewToolParser(nil), templateOf(t, "chatml").NewToolParser(parseTools)} {
		if s, c := p.Feed("<tool_call>{\"name\": \"ls\"}</tool_call>"); s != "<tool_call>{\"name\": \"ls\"}</tool_call>" || c != nil {
			t.Errorf("pass-through Feed = %q, %v", s, c)
		}
	}
	// The fallback template reads Hermes calls, as it teaches them.
	fb := mustFallback(t).NewToolParser(parseTools)
	if _, c := runParser(fb, []string{"<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>"}); len(c) != 1 || c[0].Name != "ls" {
		t.Errorf("fallback calls %+v", c)
	}
}

// Random output built from the syntaxes' pieces, fed in random pieces:
// every chunking gives what feeding it whole gives, and output without
// calls comes back unchanged.
func TestToolParsersRandom(t *testing.T) {
	frags := []string{"<tool_call>", "</tool_call>", "\n", " ", "{", "}", `"name": "ls"`, `"arguments": {}`, `"parameters": {"dir": "."}`, ",",
		"<function=ls>", "<parameter=dir>", "</parameter>", "</function>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[", "]", "ls",
		"hello", "<", "<tool", "[TOOL", "é", ";", `{"name": "ls", "arguments": {"dir": "x"}}`}
	r := rand.New(rand.NewPCG(7, 8))
	for _, family := range []string{"hermes", "qwen3-coder", "llama3", "mistral"} {
		tm := templateOf(t, family)
		for i := 0; i < 1000; i++ {
			var b strings.Builder
			for n := r.IntN(12); n >= 0; n-- {
				b.WriteString(frags[r.IntN(len(frags))])
			}
			out := b.String()
			wantText, wantCalls := runParser(tm.NewToolParser(parseTools), []string{out})
			if len(wantCalls) == 0 && wantText != out {
				t.Fatalf("%s: %q came back as %q", family, out, wantText)
			}
			var pieces []string
			for rest := out; rest != ""; {
				k := 1 + r.IntN(min(len(rest), 6))
				pieces = append(pieces, rest[:k])
				rest = rest[k:]
			}
			text, calls := runParser(tm.NewToolParser(parseTools), pieces)
			if text != wantText || len(calls) != len(wantCalls) {
				t.Fatalf("%s: %q in pieces %q: text %q calls %v, whole: %q %v", family, out, pieces, text, calls, wantText, wantCalls)
			}
			for j := range calls {
				if calls[j].Name != wantCalls[j].Name || calls[j].Arguments != wantCalls[j].Arguments {
					t.Fatalf("%s: %q: call %d %+v, whole %+v", family, out, j, calls[j], wantCalls[j])
				}
			}
		}
	}
}
