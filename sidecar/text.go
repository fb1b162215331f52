package sidecar

import (
	"strings"
	"unicode/utf8"
)

// textOut assembles generated text as valid UTF-8: bytes of a character
// split across tokens are held back until it is complete.
type textOut struct {
	text    strings.Builder // emitted, valid UTF-8
	pending []byte          // an incomplete character's first bytes
	cut     int             // text length up to a stop string, or -1
}

// push adds a token's bytes and returns the valid UTF-8 they complete.
func (o *textOut) push(piece string) string {
	o.pending = append(o.pending, piece...)
	n := validPrefix(o.pending)
	// An invalid byte that can never complete becomes U+FFFD.
	out := strings.ToValidUTF8(string(o.pending[:n]), "\uFFFD")
	o.pending = append(o.pending[:0], o.pending[n:]...)
	o.text.WriteString(out)
	return out
}

// validPrefix is the length of b without a trailing incomplete character
// (at most 3 bytes that could still become one).
func validPrefix(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		i := len(b) - k
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// stop reports whether the text so far contains a stop string, recording
// where the text ends.
func (o *textOut) stop(stops []string) bool {
	t := o.text.String()
	for _, s := range stops {
		if i := strings.Index(t, s); i >= 0 {
			o.cut = i + 1
			return true
		}
	}
	return false
}

// final is the reply text: up to a stop string, with held-back bytes as
// U+FFFD.
func (o *textOut) final() string {
	if o.cut > 0 {
		return o.text.String()[:o.cut-1]
	}
	if len(o.pending) > 0 {
		o.text.WriteString("\uFFFD")
		o.pending = nil
	}
	return o.text.String()
}
