package chat

import (
	"strings"
	"testing"
)

// split feeds text to s cut into pieces of n bytes and returns the whole
// reasoning and reply.
func split(s *ReasoningSplitter, text string, n int) (string, string) {
	var r, out strings.Builder
	for len(text) > 0 {
		k := min(n, len(text))
		a, b := s.Feed(text[:k])
		r.WriteString(a)
		out.WriteString(b)
		text = text[k:]
	}
	a, b := s.Flush()
	r.WriteString(a)
	out.WriteString(b)
	return r.String(), out.String()
}

func TestReasoningSplitter(t *testing.T) {
	thinking := &Template{thinks: true}
	plain := &Template{}
	for _, c := range []struct {
		name         string
		tmpl         *Template
		prompt, text string
		reasoning    string
		reply        string
	}{
		{"think then reply", thinking, "<|im_start|>assistant\n", "<think>\nI should greet.\n</think>\n\nHello!", "\nI should greet.\n", "Hello!"},
		{"no think block", thinking, "<|im_start|>assistant\n", "Hello <b>there</b>!", "", "Hello <b>there</b>!"},
		{"prompt opened think", thinking, "<|im_start|>assistant\n<think>\n", "hmm, a greeting\n</think>\n\nHi.", "hmm, a greeting\n", "Hi."},
		{"empty think block", thinking, "", "<think>\n\n</think>\n\nDone.", "\n\n", "Done."},
		{"think after the reply is text", thinking, "", "Use <think> tags like <think>x</think>.", "", "Use <think> tags like <think>x</think>."},
		{"unclosed think", thinking, "", "<think>still thinking", "still thinking", ""},
		{"a lone angle bracket", thinking, "", "a < b and <thin ice>", "", "a < b and <thin ice>"},
		{"template without markers", plain, "<think>", "<think>x</think>y", "", "<think>x</think>y"},
	} {
		for _, n := range []int{1, 2, 3, 5, 7, 1000} {
			r, out := split(c.tmpl.NewReasoningSplitter(c.prompt), c.text, n)
			if r != c.reasoning || out != c.reply {
				t.Errorf("%s, pieces of %d: reasoning %q reply %q, want %q %q", c.name, n, r, out, c.reasoning, c.reply)
			}
		}
	}
}

// The Qwen3 template writes think markers; the ChatML one does not.
func TestTemplateThinks(t *testing.T) {
	for name, want := range map[string]bool{"qwen3.jinja": true, "chatml.jinja": false} {
		tm, err := NewTemplate(ModelInfo{ChatTemplate: readTemplate(t, name), EOS: "<|im_end|>", Now: testClock})
		if err != nil {
			t.Fatal(err)
		}
		if tm.thinks != want {
			t.Errorf("%s: thinks %v, want %v", name, tm.thinks, want)
		}
	}
}
