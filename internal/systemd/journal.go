package systemd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// IsJournal reports whether f is the journal stream the manager connected
// this service to: $JOURNAL_STREAM holds "DEVICE:INODE" of that stream,
// and a redirected stderr no longer matches it.
func IsJournal(f *os.File) bool {
	want := os.Getenv(EnvJournalStream)
	if want == "" {
		return false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return want == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// JournalHandler is a slog text handler for a service whose stderr is the
// journal: no time attribute (journald stamps each line itself) and a
// "<N>" syslog priority prefix on each line, which journald strips and
// records as the entry's priority, so levels survive.
type JournalHandler struct {
	inner slog.Handler
	out   *priorityWriter
}

// NewJournalHandler returns a JournalHandler writing to w; opts are as
// for slog.NewTextHandler (the time attribute is dropped after
// opts.ReplaceAttr runs).
func NewJournalHandler(w io.Writer, opts *slog.HandlerOptions) *JournalHandler {
	var o slog.HandlerOptions
	if opts != nil {
		o = *opts
	}
	replace := o.ReplaceAttr
	o.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		if replace != nil {
			return replace(groups, a)
		}
		return a
	}
	pw := &priorityWriter{w: w}
	return &JournalHandler{inner: slog.NewTextHandler(pw, &o), out: pw}
}

// Enabled implements slog.Handler.
func (h *JournalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

// Handle implements slog.Handler: one line, prefixed with the record's
// syslog priority.
func (h *JournalHandler) Handle(ctx context.Context, r slog.Record) error {
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	h.out.prefix = priorityPrefix(r.Level)
	return h.inner.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *JournalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &JournalHandler{inner: h.inner.WithAttrs(attrs), out: h.out}
}

// WithGroup implements slog.Handler.
func (h *JournalHandler) WithGroup(name string) slog.Handler {
	return &JournalHandler{inner: h.inner.WithGroup(name), out: h.out}
}

// priorityWriter prefixes each write (the text handler writes one record
// per call) with the priority of the record being handled; mu, held by
// Handle, pairs the prefix with its record.
type priorityWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *priorityWriter) Write(b []byte) (int, error) {
	line := make([]byte, 0, len(p.prefix)+len(b))
	line = append(append(line, p.prefix...), b...)
	if _, err := p.w.Write(line); err != nil {
		return 0, err
	}
	return len(b), nil
}

// priorityPrefix maps slog levels to syslog priorities: debug 7, info 6,
// warn 4, error 3 (levels in between take the lower neighbour's).
func priorityPrefix(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "<7>"
	case l < slog.LevelWarn:
		return "<6>"
	case l < slog.LevelError:
		return "<4>"
	}
	return "<3>"
}
