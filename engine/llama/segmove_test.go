package llama

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/logitstat"
)

// moveSegment is the dense layout's segment reuse on the engine alone:
// the KV of old[from:] is taken out, everything past keep removed, gap
// decoded right after the kept prefix and the taken range put back behind
// it (shifted), then next decoded; it returns next's logits.
func moveSegment(t *testing.T, c *Context, old []engine.Token, keep, from int, gap, next []engine.Token) []float32 {
	t.Helper()
	ctx := t.Context()
	c.Clear()
	if err := c.Decode(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	r, err := c.ExtractRange(from, len(old))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Remove(keep, -1); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(ctx, gap, keep); err != nil {
		t.Fatal(err)
	}
	at := keep + len(gap)
	if err := c.InsertRange(r, at); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(ctx, next, at+r.Count); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), c.Logits()...)
}

// TestSegmentMovedPastAChange: a segment's KV moved behind a changed
// prefix (a gap decoded right after the kept part, the range inserted
// after it) gives the exact logits when the gap equals what was removed,
// and close logits when it does not (the moved KV attended to the old
// prefix): the engine side of segment reuse.
func TestSegmentMovedPastAChange(t *testing.T) {
	m := loadStories(t)
	head, _ := m.Tokenize("Today is Monday. Tom went to the park with his dog.", true)
	seg, _ := m.Tokenize(" Lily had a red ball. She played with it every day. She liked to throw it high.", false)
	next, _ := m.Tokenize(" One day", false)
	changed, _ := m.Tokenize(" Today is Tuesday, a sunny day. Tom went to the park with his dog.", false)
	c := newCtx(t, m, 512)
	old := append(append([]engine.Token(nil), head...), seg...)

	// Exact reference: the old prompt then next.
	ref := referenceLogits(t, c, old, next)
	// The same gap (the removed tokens again) at the same length: the
	// moved range lands where it was and the logits are the reference's.
	got := moveSegment(t, c, old, 1, len(head), head[1:], next)
	if d := maxDiff(ref, got); d > shiftTolerance(t) {
		t.Fatalf("segment put back behind the same prefix: logits differ by %g", d)
	}

	// A changed, longer prefix: the segment moves up; compare with an
	// exact prefill of the new prompt.
	c.Clear()
	newPrompt := append(append([]engine.Token{head[0]}, changed...), seg...)
	exact := referenceLogits(t, c, newPrompt, next)
	approx := moveSegment(t, c, old, 1, len(head), changed, next)
	if equalFloats(exact, approx) {
		t.Fatal("moved KV gave the exact logits: the change was not attended to")
	}
	d := logitstat.KL(logitstat.Softmax(exact), logitstat.Softmax(approx))
	if math.IsNaN(d) || d > 1 {
		t.Fatalf("KL(exact || moved) = %g: the moved segment's KV is not where its tokens are", d)
	}
	t.Logf("KL(exact || moved segment) = %.4f nats", d)

	// A decode that does not follow the last position is refused (as
	// llama.cpp refuses it) and changes nothing.
	used := c.Used()
	if err := c.Decode(t.Context(), next, c.seq.Max()+5); !errors.Is(err, engine.ErrInvalidArgument) || !strings.Contains(err.Error(), "right after") {
		t.Fatalf("decode past a hole: %v", err)
	}
	if c.Used() != used {
		t.Fatal("refused decode changed the KV")
	}
}
