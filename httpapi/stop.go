package httpapi

import "strings"

// stopFilter turns generated pieces into text that is safe to show: it
// holds back a tail that may begin a stop string and never passes a stop
// string or what follows it. The daemon cuts its final text at the first
// stop string too; rest hands what is still owed against that text.
type stopFilter struct {
	stops   []string
	text    strings.Builder // everything generated
	shown   int             // bytes of text handed out
	stopped bool
	matched string // the stop string that ended the text (the earliest)
}

// push adds a piece and returns the newly safe text.
func (f *stopFilter) push(piece string) string {
	if f.stopped {
		return ""
	}
	f.text.WriteString(piece)
	t := f.text.String()
	end := len(t)
	for _, s := range f.stops {
		if i := strings.Index(t[max(0, f.shown-len(s)):], s); i >= 0 {
			if at := max(0, f.shown-len(s)) + i; at < end || !f.stopped {
				end, f.matched = min(end, at), s
			}
			f.stopped = true
		}
	}
	if !f.stopped {
		for _, s := range f.stops {
			end = min(end, len(t)-heldTail(t, s))
		}
	}
	if end <= f.shown {
		return ""
	}
	out := t[f.shown:end]
	f.shown = end
	return out
}

// rest returns what final (the daemon's text, cut before any stop string)
// holds beyond what was shown.
func (f *stopFilter) rest(final string) string {
	if f.shown >= len(final) || !strings.HasPrefix(final, f.text.String()[:f.shown]) {
		return ""
	}
	out := final[f.shown:]
	f.shown = len(final)
	return out
}

// heldTail is the length of the longest tail of t that is a proper prefix
// of s.
func heldTail(t, s string) int {
	for n := min(len(s)-1, len(t)); n > 0; n-- {
		if strings.HasSuffix(t, s[:n]) {
			return n
		}
	}
	return 0
}
