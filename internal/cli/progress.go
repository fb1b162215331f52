package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/client"
)

// Progress is a one-line progress bar on stderr for a loop with a known
// total. It draws only when stderr is a terminal and neither --no-progress
// nor CTXD_NO_PROGRESS is set; otherwise NewProgress returns nil, and every
// method of a nil *Progress does nothing, so callers never check.
// Redraws are rate-limited; one goroutine drives a bar at a time.
type Progress struct {
	out     io.Writer
	width   int // terminal columns
	label   string
	unit    string
	total   int64
	done    int64
	start   time.Time
	drawn   time.Time // last redraw
	visible bool      // the bar's line is on the screen
	now     func() time.Time
}

// progressEvery is the shortest interval between two redraws.
const progressEvery = 100 * time.Millisecond

// NewProgress starts a bar for total units of work (unit names them: "trials",
// "tokens"; "B" shows bytes in KiB/MiB/GiB), or returns nil when no bar
// should be drawn.
func (e *Env) NewProgress(label string, total int64, unit string) *Progress {
	if e.NoProgress || total <= 0 {
		return nil
	}
	if v := os.Getenv("CTXD_NO_PROGRESS"); v != "" && v != "0" {
		return nil
	}
	width, ok := terminalWidth(e.Stderr)
	if !ok {
		return nil
	}
	p := &Progress{out: e.Stderr, width: width, label: label, unit: unit, total: total, now: time.Now}
	p.start = p.now()
	p.draw(true)
	return p
}

// terminalWidth reports whether w is a terminal, and its width in columns
// (80 when the terminal does not say).
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return 0, false
	}
	if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Col >= 20 {
		return int(ws.Col), true
	}
	return 80, true
}

// Add records n more units done.
func (p *Progress) Add(n int64) {
	if p != nil {
		p.Set(p.done + n)
	}
}

// Set records done units done (clamped to the total).
func (p *Progress) Set(done int64) {
	if p == nil {
		return
	}
	p.done = min(max(done, 0), p.total)
	p.draw(p.done == p.total)
}

// SetLabel changes the text before the bar (shown at the next redraw).
func (p *Progress) SetLabel(label string) {
	if p != nil {
		p.label = label
	}
}

// Clear erases the bar's line, so that other output can be written; the
// next update draws it again.
func (p *Progress) Clear() {
	if p == nil || !p.visible {
		return
	}
	fmt.Fprint(p.out, "\r\x1b[K")
	p.visible = false
	p.drawn = time.Time{}
}

// Done draws the final state and ends the line, leaving it on the screen.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	if !p.visible || p.done < p.total {
		p.draw(true)
	}
	fmt.Fprintln(p.out)
	p.visible = false
}

func (p *Progress) draw(force bool) {
	t := p.now()
	if !force && p.visible && t.Sub(p.drawn) < progressEvery {
		return
	}
	p.drawn, p.visible = t, true
	st := progressState{Label: p.label, Unit: p.unit, Done: p.done, Total: p.total, Elapsed: t.Sub(p.start)}
	fmt.Fprint(p.out, "\r"+renderProgress(st, p.width-1)+"\x1b[K")
}

// progressState is what one frame of a bar shows.
type progressState struct {
	Label       string
	Unit        string
	Done, Total int64
	Elapsed     time.Duration
}

// renderProgress draws st in at most width columns:
//
//	label [██████░░░░░░]  12/20 trials  3.4/s        ETA 2s
//
// The bar takes what the label and the figures leave; a label that would
// squeeze it below 10 columns is cut with "…".
func renderProgress(st progressState, width int) string {
	frac := 0.0
	if st.Total > 0 {
		frac = min(float64(st.Done)/float64(st.Total), 1)
	}
	// The done count is padded to the total's width, so the bar does not
	// jump as digits are added.
	done, total := fmt.Sprint(st.Done), fmt.Sprint(st.Total)
	if st.Unit == "B" {
		done, total = fmtBytes(st.Done), fmtBytes(st.Total)
	}
	count := strings.Repeat(" ", max(utf8.RuneCountInString(total)-utf8.RuneCountInString(done), 0)) + done + "/" + total
	if st.Unit != "" && st.Unit != "B" {
		count += " " + st.Unit
	}
	secs := st.Elapsed.Seconds()
	rate, eta := "", "ETA ?"
	if st.Done > 0 && secs > 0 {
		r := float64(st.Done) / secs
		rate = fmtRate(r, st.Unit)
		left := min(float64(st.Total-st.Done)/r, 1e9) // seconds; capped so the Duration cannot overflow
		eta = "ETA " + fmtDuration(time.Duration(left*float64(time.Second)))
	}
	if st.Done >= st.Total {
		eta = "in " + fmtDuration(st.Elapsed)
	}
	// Rate and ETA get fixed widths too, for the same reason (the padding
	// is measured, then trimmed from the line).
	right := fmt.Sprintf("  %s  %-11s  %-10s", count, rate, eta)
	const minBar = 10
	// A narrow terminal drops the rate, then the ETA.
	if fits := width - 2 - minBar; utf8.RuneCountInString(right) > fits {
		if right = "  " + count + "  " + eta; utf8.RuneCountInString(right) > fits {
			right = "  " + count
		}
	}
	label := st.Label
	room := width - utf8.RuneCountInString(right) - 2 // brackets
	if label != "" {
		room-- // space after the label
	}
	if over := utf8.RuneCountInString(label) + minBar - room; over > 0 && label != "" {
		keep := utf8.RuneCountInString(label) - over - 1
		if keep <= 0 {
			label = ""
			room++
		} else {
			label = string([]rune(label)[:keep]) + "…"
		}
	}
	barLen := max(room-utf8.RuneCountInString(label), minBar)
	filled := int(frac*float64(barLen) + 1e-9)
	var b strings.Builder
	if label != "" {
		b.WriteString(label)
		b.WriteByte(' ')
	}
	b.WriteByte('[')
	b.WriteString(strings.Repeat("█", filled))
	b.WriteString(strings.Repeat("░", barLen-filled))
	b.WriteByte(']')
	b.WriteString(strings.TrimRight(right, " "))
	return b.String()
}

func fmtRate(r float64, unit string) string {
	if unit == "B" {
		return fmtBytes(int64(r)) + "/s"
	}
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f/s", r)
	case r >= 1:
		return fmt.Sprintf("%.1f/s", r)
	}
	return fmt.Sprintf("%.1fs each", 1/r)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// fmtDuration is a short duration: 12s, 3m04s, 1h02m, >99h.
func fmtDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s >= 100*3600:
		return ">99h"
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

// Tick wraps a per-item callback (next may be nil) so that each call
// clears the bar, lets next print, and advances the bar by one.
func Tick[T any](p *Progress, next func(T)) func(T) {
	return func(v T) {
		p.Clear()
		if next != nil {
			next(v)
		}
		p.Add(1)
	}
}

// CallProgress returns a context under which a long call (EnsurePrefix,
// PrefillSuffix, Restore) asks the daemon for progress and draws it, and
// the function that ends the bar.
func (e *Env) CallProgress(ctx context.Context, label string) (context.Context, func()) {
	var bar *Progress
	started := false
	var total int64
	ctx = client.WithProgress(ctx, func(p client.Progress) {
		if started && p.Total != total {
			bar.Done() // the next call of the same operation
			started = false
		}
		if !started {
			started, total = true, p.Total
			unit := "tokens"
			if p.Phase == "restore" {
				unit = "blocks"
			}
			bar = e.NewProgress(label, p.Total, unit)
		}
		bar.Set(p.Done)
	})
	return ctx, func() {
		if started {
			bar.Done()
		}
	}
}
