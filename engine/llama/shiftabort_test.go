package llama

import (
	"context"
	"math"
	"testing"
)

// A decode aborted as it starts, after a move left K rotations pending,
// leaves the KV as an uninterrupted run would: llama.cpp rotates layer
// after layer and keeps the shift pending when aborted part-way, so a
// retry would rotate the first layers twice. The rotations now run before
// the abort is armed.
func TestAbortNeverLandsInAShift(t *testing.T) {
	m := loadStories(t)
	toks := randomTokens(21, 160, m.Facts().VocabSize)
	next := randomTokens(22, 8, m.Facts().VocabSize)
	run := func(abort bool) []float32 {
		c := newCtx(t, m, 2048)
		if err := c.Decode(t.Context(), toks, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Remove(40, 80); err != nil {
			t.Fatal(err)
		}
		if err := c.Shift(80, len(toks), -40); err != nil {
			t.Fatal(err)
		}
		end := len(toks) - 40
		if abort {
			c.abortAtStart = true
			if err := c.Decode(context.Background(), next, end); err == nil {
				t.Fatal("a decode aborted at its start succeeded")
			}
			c.abortAtStart = false
		}
		if err := c.Decode(t.Context(), next, end); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), c.Logits()...)
	}
	want, got := run(false), run(true)
	var d float64
	for i := range want {
		d = max(d, math.Abs(float64(got[i]-want[i])))
	}
	if d > 1e-3 {
		t.Fatalf("after an aborted decode the logits differ from an uninterrupted run's by %g (a shift applied twice?)", d)
	}
}
