package enginefake

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

func modelFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake.gguf")
	if err := os.WriteFile(p, []byte("enginefake model"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newCtx(t *testing.T, o Options, co engine.ContextOptions) (*Backend, *Context) {
	t.Helper()
	b := New(o)
	m, err := b.Load(context.Background(), modelFile(t), engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if co.ContextTokens == 0 {
		co.ContextTokens = 256
	}
	ec, err := m.NewContext(co)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ec.Close(); m.Close() })
	return b, ec.(*Context)
}

func toks(t *testing.T, c *Context, s string) []engine.Token {
	out, err := c.model.Tokenize(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// greedy decodes prompt at pos0, then n greedy tokens.
func greedy(t *testing.T, c *Context, prompt []engine.Token, pos0, n int) []engine.Token {
	t.Helper()
	if len(prompt) > 0 {
		if err := c.Decode(context.Background(), prompt, pos0); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := c.NewSampler(engine.SamplingParams{})
	defer s.Close()
	var out []engine.Token
	pos := pos0 + len(prompt)
	for i := 0; i < n; i++ {
		tok := c.Sample(s)
		out = append(out, tok)
		if err := c.Decode(context.Background(), []engine.Token{tok}, pos+i); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// again re-decodes the token at end-1 (for its logits, as the daemon does
// after moving KV) and then n greedy tokens.
func again(t *testing.T, c *Context, end, n int) []engine.Token {
	t.Helper()
	last := c.cells[end-1].tok
	if _, err := c.Remove(end-1, end); err != nil {
		t.Fatal(err)
	}
	return greedy(t, c, []engine.Token{last}, end-1, n)
}

func TestFactsAndTokenizer(t *testing.T) {
	b := New(Options{TrainedContext: 512, NoShift: true})
	path := modelFile(t)
	m, err := b.Load(context.Background(), path, engine.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := m.Facts()
	if f.TrainedContext != 512 || f.CanShift || len(f.Digest) != 64 || f.KVBytesPerToken(policy.KVTypeF16) != 128 {
		t.Fatalf("facts %+v", f)
	}
	got, _ := m.Tokenize("<s>hi", true)
	if !slices.Equal(got, []engine.Token{TokBOS, ByteToken('<'), ByteToken('s'), ByteToken('>'), ByteToken('h'), ByteToken('i')}) {
		t.Fatalf("Tokenize parsed a control text: %v", got)
	}
	sp, _ := m.TokenizeSpecial("<s>hi</s>")
	if !slices.Equal(sp, []engine.Token{TokBOS, ByteToken('h'), ByteToken('i'), TokEOS}) || !m.IsEOG(TokEOS) || m.Piece(ByteToken('h')) != "h" {
		t.Fatalf("TokenizeSpecial %v", sp)
	}
	if _, err := b.Load(context.Background(), filepath.Join(t.TempDir(), "none"), engine.ModelOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Load(ctx, path, engine.ModelOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled load: %v", err)
	}
	if _, err := m.NewContext(engine.ContextOptions{ContextTokens: 64, KVType: policy.KVTypeQ8_0}); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("q8_0 without flash attention: %v", err)
	}
	c, _ := m.NewContext(engine.ContextOptions{ContextTokens: 64})
	if err := m.Close(); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("closing a model with an open context: %v", err)
	}
	c.Close()
	if err := m.Close(); err != nil || b.OpenModels() != 0 {
		t.Fatal(err)
	}
	if err := b.LoadBackends("/nowhere"); !errors.Is(err, engine.ErrNoBackends) {
		t.Fatal(err)
	}
}

// The logits depend on the tokens and positions in the KV and on nothing
// else; chunked decoding equals one call.
func TestLogitsFollowTheKV(t *testing.T) {
	_, a := newCtx(t, Options{}, engine.ContextOptions{BatchTokens: 7})
	_, b := newCtx(t, Options{}, engine.ContextOptions{})
	p := toks(t, a, "Once upon a time there was a fake engine.")
	if err := a.Decode(context.Background(), p[:10], 0); err != nil {
		t.Fatal(err)
	}
	ga := greedy(t, a, p[10:], 10, 12)
	gb := greedy(t, b, p, 0, 12)
	if !slices.Equal(ga, gb) {
		t.Fatalf("chunked %v != whole %v", ga, gb)
	}
	// The same tokens one position later give other logits.
	_, c := newCtx(t, Options{}, engine.ContextOptions{})
	if gc := greedy(t, c, p, 1, 12); slices.Equal(gc, gb) {
		t.Fatal("positions do not matter")
	}
	// One token different.
	_, d := newCtx(t, Options{}, engine.ContextOptions{})
	q := slices.Clone(p)
	q[3]++
	if gd := greedy(t, d, q, 0, 12); slices.Equal(gd, gb) {
		t.Fatal("tokens do not matter")
	}
}

// Extract, remove and insert back is bitwise; the same range inserted
// elsewhere, or with a token-major rewrite not undone, is not the same.
func TestRangesRoundTrip(t *testing.T) {
	for _, fa := range []bool{false, true} {
		_, c := newCtx(t, Options{}, engine.ContextOptions{FlashAttention: fa})
		p := toks(t, c, "The quick brown fox jumps over the lazy dog again and again.")
		if err := c.Decode(context.Background(), p, 0); err != nil {
			t.Fatal(err)
		}
		before, _ := c.SaveSeq()
		r, err := c.ExtractRange(10, 30)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Blob) != headerBytes+20*128+trailerBytes {
			t.Fatalf("blob of %d bytes", len(r.Blob))
		}
		tm, changed := Codec{}.TokenMajor(r.Blob)
		if changed == fa {
			t.Fatalf("flash attention %v: TokenMajor changed=%v", fa, changed)
		}
		back, err := Codec{}.FromTokenMajor(tm)
		if err != nil || !bytes.Equal(back, r.Blob) {
			t.Fatalf("codec round trip: %v", err)
		}
		if n, err := c.Remove(10, 30); n != 20 || err != nil {
			t.Fatal(n, err)
		}
		if changed {
			if err := c.InsertRange(engine.Range{Pos0: 10, Count: 20, Blob: tm}, 10); !errors.Is(err, engine.ErrInvalidArgument) {
				t.Fatalf("rewritten blob inserted: %v", err)
			}
		}
		if err := c.InsertRange(engine.Range{Pos0: 10, Count: 20, Blob: back}, 10); err != nil {
			t.Fatal(err)
		}
		after, _ := c.SaveSeq()
		if !bytes.Equal(before.Blob, after.Blob) || !slices.Equal(before.Positions, after.Positions) {
			t.Fatal("extract + insert is not bitwise")
		}
		// Moved down by 5: other positions, other output.
		ref := again(t, c, len(p), 4)
		c.Remove(len(p), -1)
		c.Remove(10, 30)
		if err := c.InsertRange(r, 100); err != nil {
			t.Fatal(err)
		}
		if err := c.Shift(100, 120, -90); err != nil {
			t.Fatal(err)
		}
		if got := again(t, c, len(p), 4); !slices.Equal(got, ref) {
			t.Fatalf("insert at 100 + shift back: %v, want %v", got, ref)
		}
		c.Remove(len(p), -1)
		c.Remove(10, 30)
		if err := c.InsertRange(r, 5); err == nil {
			t.Fatal("insert over resident positions accepted")
		}
		c.Shift(30, len(p), 5)
		if err := c.InsertRange(r, 15); err != nil {
			t.Fatal(err)
		}
		if got := again(t, c, len(p)+5, 4); slices.Equal(got, ref) {
			t.Fatal("a layout moved by 5 continues alike")
		}
	}
}

func TestSentinels(t *testing.T) {
	ctx := context.Background()
	_, c := newCtx(t, Options{}, engine.ContextOptions{ContextTokens: 32})
	p := toks(t, c, "0123456789")
	if err := c.Decode(ctx, p, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(ctx, make([]engine.Token, 30), 10); !errors.Is(err, engine.ErrContextFull) {
		t.Errorf("full: %v", err)
	}
	for name, err := range map[string]error{
		"decode over":   c.Decode(ctx, p, 5),
		"bad token":     c.Decode(ctx, []engine.Token{vocabSize}, 20),
		"neg pos":       c.Decode(ctx, p, -1),
		"shift overlap": c.Shift(0, 5, 3),
		"shift below 0": c.Shift(0, 5, -1),
		"extract hole":  func() error { _, err := c.ExtractRange(5, 15); return err }(),
		"bad range":     func() error { _, err := c.Remove(5, 2); return err }(),
		"junk insert":   c.InsertRange(engine.Range{Pos0: 20, Count: 2, Blob: []byte("junk")}, 20),
		"junk seq":      func() error { err := c.LoadSeq(engine.SeqState{Positions: []int{0}, Blob: []byte("x")}); return err }(),
	} {
		if !errors.Is(err, engine.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	_, ns := newCtx(t, Options{NoShift: true}, engine.ContextOptions{})
	ns.Decode(ctx, p, 0)
	r, _ := ns.ExtractRange(0, 4)
	ns.Remove(0, 4)
	if err := ns.Shift(4, 10, -4); !errors.Is(err, engine.ErrNoShift) {
		t.Errorf("no-shift Shift: %v", err)
	}
	if err := ns.InsertRange(r, 20); !errors.Is(err, engine.ErrNoShift) {
		t.Errorf("no-shift InsertRange: %v", err)
	}
	if err := ns.InsertRange(r, 0); err != nil {
		t.Errorf("no-shift InsertRange in place: %v", err)
	}
	// A blob of another context's settings.
	_, fa := newCtx(t, Options{}, engine.ContextOptions{FlashAttention: true})
	if err := fa.InsertRange(r, 0); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Errorf("foreign blob: %v", err)
	}
	c.Close()
	if err := c.Decode(ctx, p, 20); !errors.Is(err, engine.ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}

func TestSaveLoadAndCancel(t *testing.T) {
	_, c := newCtx(t, Options{}, engine.ContextOptions{BatchTokens: 4})
	p := toks(t, c, "a saved sequence, with a hole")
	c.Decode(context.Background(), p, 0)
	c.Remove(5, 9)
	st, err := c.SaveSeq()
	if err != nil {
		t.Fatal(err)
	}
	ref := again(t, c, len(p), 6)
	c.Clear()
	if err := c.LoadSeq(st); err != nil {
		t.Fatal(err)
	}
	if got := again(t, c, len(p), 6); !slices.Equal(got, ref) {
		t.Fatal("LoadSeq does not continue alike")
	}
	bad := engine.SeqState{Positions: append([]int{}, st.Positions...), Blob: st.Blob}
	bad.Positions[3]++
	if err := c.LoadSeq(bad); !errors.Is(err, engine.ErrInvalidArgument) || c.Used() != 0 {
		t.Fatalf("mismatched positions: %v, %d left", err, c.Used())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Decode(ctx, p, 0); !errors.Is(err, context.Canceled) || c.Used() != 0 {
		t.Fatalf("cancelled decode: %v, %d resident", err, c.Used())
	}
}

func TestFaults(t *testing.T) {
	boom := errors.New("boom")
	f := &Faults{Decode: func(n int, _ []engine.Token, _ int) error {
		if n == 2 {
			return engine.ErrDecode
		}
		return nil
	}, Extract: func(int) error { return boom }}
	b, c := newCtx(t, Options{Faults: f}, engine.ContextOptions{})
	p := toks(t, c, "faulty")
	if err := c.Decode(context.Background(), p, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(context.Background(), p, 6); !errors.Is(err, engine.ErrDecode) || c.Used() != 6 {
		t.Fatalf("second decode: %v, %d resident", err, c.Used())
	}
	if _, err := c.ExtractRange(0, 3); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if b.DecodedTokens() != 6 {
		t.Fatalf("decoded %d", b.DecodedTokens())
	}
}

func TestSeededSampling(t *testing.T) {
	_, c := newCtx(t, Options{}, engine.ContextOptions{})
	c.Decode(context.Background(), toks(t, c, "seed"), 0)
	draw := func(seed uint64) []engine.Token {
		s, err := c.NewSampler(engine.SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.9, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		var out []engine.Token
		for i := 0; i < 8; i++ {
			out = append(out, c.Sample(s))
		}
		return out
	}
	if a, b := draw(1), draw(1); !slices.Equal(a, b) {
		t.Fatal("same seed, other tokens")
	}
	if _, err := c.NewSampler(engine.SamplingParams{Temperature: -1}); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatal(err)
	}
}
