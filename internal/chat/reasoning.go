package chat

import "strings"

// Reasoning models (Qwen3, DeepSeek-R1, QwQ and their kin) write their
// reasoning between <think> and </think> before the reply. Agents expect it
// apart from the reply: Anthropic's thinking blocks, the Responses API's
// reasoning items, OpenAI-compatible servers' reasoning_content, Ollama's
// thinking. A ReasoningSplitter separates the two as the model's pieces
// stream in; it is active only for templates that write those markers.

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"
)

// ReasoningSplitter splits a stream of generated text into reasoning and
// reply. The zero value (and the splitter of a template without think
// markers) passes all text through as reply.
type ReasoningSplitter struct {
	active  bool
	in      bool   // inside <think>…</think>
	started bool   // reply text was seen (a later <think> is text)
	pending string // text held back: it may be the start of a marker
}

// NewReasoningSplitter returns the splitter of a turn whose rendered
// prompt ends with prompt's text: a template whose generation prompt
// already opened <think> (forced reasoning) starts inside it.
func (t *Template) NewReasoningSplitter(prompt string) *ReasoningSplitter {
	if !t.thinks {
		return &ReasoningSplitter{}
	}
	in := strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), thinkOpen)
	return &ReasoningSplitter{active: true, in: in}
}

// Feed takes the next generated piece and returns the reasoning and the
// reply text it completes. Text that may begin a marker is held back
// until the next piece or Flush.
func (s *ReasoningSplitter) Feed(piece string) (reasoning, reply string) {
	if !s.active {
		return "", piece
	}
	text := s.pending + piece
	s.pending = ""
	var r, out strings.Builder
	for text != "" {
		marker := thinkOpen
		if s.in {
			marker = thinkClose
		}
		if i := strings.Index(text, marker); i >= 0 {
			s.emit(&r, &out, text[:i])
			text = text[i+len(marker):]
			if s.in {
				// The reply starts after the block; the blank lines
				// templates put there are not part of it (emit skips
				// them until the reply's first text).
				s.started = false
			} else if s.started {
				// <think> after the reply began is the reply's text.
				out.WriteString(marker)
				continue
			}
			s.in = !s.in
			continue
		}
		// Hold back a suffix that could be the start of the marker.
		keep := partialSuffix(text, marker)
		s.emit(&r, &out, text[:len(text)-keep])
		s.pending = text[len(text)-keep:]
		break
	}
	return r.String(), out.String()
}

func (s *ReasoningSplitter) emit(r, out *strings.Builder, text string) {
	if text == "" {
		return
	}
	if s.in {
		r.WriteString(text)
		return
	}
	if !s.started {
		// Blank space before a reply or a think block is neither.
		text = strings.TrimLeft(text, " \t\r\n")
		if text == "" {
			return
		}
	}
	s.started = true
	out.WriteString(text)
}

// Flush returns what was held back at the end of the stream.
func (s *ReasoningSplitter) Flush() (reasoning, reply string) {
	text := s.pending
	s.pending = ""
	if s.in {
		return text, ""
	}
	return "", text
}

// partialSuffix is the length of the longest suffix of text that is a
// proper prefix of marker.
func partialSuffix(text, marker string) int {
	for n := min(len(text), len(marker)-1); n > 0; n-- {
		if strings.HasSuffix(text, marker[:n]) {
			return n
		}
	}
	return 0
}
