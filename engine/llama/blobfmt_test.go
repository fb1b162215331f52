package llama

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
)

func TestTokenMajorRoundTrip(t *testing.T) {
	m := loadStories(t)
	prompt, _ := m.Tokenize(strings.Repeat("Lily had a red ball. She played with it every day. ", 4), true)
	for _, fa := range []bool{false, true} {
		c, err := m.newContext(engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, DecodeThreads: 1, FlashAttention: fa})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(context.Background(), prompt, 0); err != nil {
			t.Fatal(err)
		}
		r, err := c.ExtractRange(3, 3+40)
		if err != nil {
			t.Fatal(err)
		}
		tm, changed := TokenMajor(r.Blob)
		if changed == fa {
			t.Fatalf("flash attention %v: TokenMajor changed = %v (V is transposed only without flash attention)", fa, changed)
		}
		back, err := FromTokenMajor(tm)
		if err != nil || !bytes.Equal(back, r.Blob) {
			t.Fatalf("flash attention %v: round trip differs (%v)", fa, err)
		}
		if changed && bytes.Equal(tm, r.Blob) {
			t.Fatal("TokenMajor reported a change but the bytes are equal")
		}
		// The restored bytes are accepted by the engine.
		if _, err := c.Remove(3, 43); err != nil {
			t.Fatal(err)
		}
		if err := c.InsertRange(engine.Range{Pos0: r.Pos0, Count: r.Count, Blob: back}, 3); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	// Not a blob: refused with the sentinel, and left alone by TokenMajor.
	junk := []byte("definitely not a sequence state")
	if out, changed := TokenMajor(junk); changed || !bytes.Equal(out, junk) {
		t.Fatal("TokenMajor changed a foreign blob")
	}
	if _, err := FromTokenMajor(junk); !errors.Is(err, ErrBlobFormat) {
		t.Fatalf("FromTokenMajor(junk) = %v, want ErrBlobFormat", err)
	}
}
