package policy

import (
	"fmt"
	"unicode/utf8"
)

// ControlSpan is a byte range [Start, End) of a segment's Text that is the
// text of one of the model's control tokens, written there by a chat
// template (e.g. "<|im_start|>", "<|eot_id|>", "[INST]"). The daemon
// tokenizes a control span with the model's special-token texts parsed, so
// it becomes the control token; every other byte of Text is tokenized with
// special-token texts left as text, so message content can never forge a
// control token.
type ControlSpan struct {
	Start, End int
}

// controlProblem describes the first rule spans break for a segment of
// text, or returns "": each span is non-empty, within text, on rune
// boundaries, and after the previous one; a segment with Tokens has none.
func controlProblem(spans []ControlSpan, text string, tokens int) string {
	if len(spans) > 0 && tokens > 0 {
		return "control spans are set together with tokens"
	}
	prev := 0
	for j, c := range spans {
		switch {
		case c.Start < prev || c.End <= c.Start || c.End > len(text):
			return fmt.Sprintf("control span %d [%d,%d) is empty, out of order or outside the text (%d bytes)", j, c.Start, c.End, len(text))
		case !runeStart(text, c.Start) || !runeStart(text, c.End):
			return fmt.Sprintf("control span %d [%d,%d) splits a character", j, c.Start, c.End)
		}
		prev = c.End
	}
	return ""
}

// runeStart reports whether i is a rune boundary of s (len(s) included).
func runeStart(s string, i int) bool {
	return i == len(s) || utf8.RuneStart(s[i])
}

// TextPiece is a run of a segment's text and whether it is a control span.
type TextPiece struct {
	Text    string
	Control bool
}

// Pieces cuts s.Text at its control spans, in order: the runs between them
// (Control false, empty runs left out) and the spans (Control true). The
// concatenation of the pieces' texts is s.Text. s must be valid.
func (s Segment) Pieces() []TextPiece {
	if len(s.Control) == 0 {
		return []TextPiece{{Text: s.Text}}
	}
	out := make([]TextPiece, 0, 2*len(s.Control)+1)
	at := 0
	for _, c := range s.Control {
		if c.Start > at {
			out = append(out, TextPiece{Text: s.Text[at:c.Start]})
		}
		out = append(out, TextPiece{Text: s.Text[c.Start:c.End], Control: true})
		at = c.End
	}
	if at < len(s.Text) {
		out = append(out, TextPiece{Text: s.Text[at:]})
	}
	return out
}
