package layout

import (
	"context"
	"fmt"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// denseLayout keeps token i of the tape at position i of sequence 0: the
// tape can be as long as the engine's context and no longer.
type denseLayout struct {
	env  *Env
	tape *Tape
}

// NewDense is the dense layout of the session whose tape is t.
func NewDense(env *Env, t *Tape) Layout { return &denseLayout{env: env, tape: t} }

func (d *denseLayout) Mode() string   { return "dense" }
func (d *denseLayout) MaxTokens() int { return d.env.ContextTokens }

func (d *denseLayout) Sync(ctx context.Context, target Prompt, needLogits, keepTail, _ bool) (SyncResult, error) {
	tape := d.tape
	r := SyncResult{PromptTokens: len(target.Tokens)}
	limit := d.env.ContextTokens
	if len(target.Tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.Tokens)), ContextTokens: int64(limit)}
	}
	lcp := tape.ReusablePrefix(target)
	r.Reusable = lcp
	keep := lcp
	if keep == len(target.Tokens) {
		if keepTail && !needLogits {
			r.Reused = keep
			r.Approximate = keep - tape.ExactTokens(keep)
			return r, nil
		}
		if needLogits && keep > 0 && tape.logitsAt != keep {
			keep-- // recompute the last token for its logits
		}
	} else if done, err := d.segmentSync(ctx, target, keep, needLogits, keepTail, &r); done || err != nil {
		return r, err
	}
	r.Approximate = keep - tape.ExactTokens(keep)
	if keep < len(tape.tokens) {
		n, err := d.env.Engine.Remove(keep, -1)
		if err != nil {
			return r, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
		}
		r.Dropped = n
		tape.Keep(keep)
	}
	if err := d.prefill(ctx, target, keep, len(target.Tokens)); err != nil {
		return r, err
	}
	r.Reused = keep
	r.Prefilled = len(target.Tokens) - keep
	// Adopt target's spans for the tokens it covers.
	tape.spans = target.Spans
	return r, nil
}

// prefill decodes target.Tokens[from:to] in chunks, extending the tape as
// each chunk lands so a cancellation keeps what was done.
func (d *denseLayout) prefill(ctx context.Context, target Prompt, from, to int) error {
	tape, ectx := d.tape, d.env.Engine
	if from >= to {
		return nil
	}
	chunk := ectx.Options().BatchTokens * 4
	if d.env.WantsProgress(ctx) {
		chunk = ectx.Options().BatchTokens
	}
	for off, end := from, from; off < to; off = end {
		d.env.Progress(ctx, "prefill", off-from, to-from)
		step := chunk
		if off > from {
			// Between chunks other sessions' calls get their turns; the
			// spans say what the tape holds so far.
			tape.spans = ClipSpans(target.Spans, len(tape.tokens))
			if err := d.env.Yield(); err != nil {
				return err
			}
		}
		if d.env.Contended() {
			step = ectx.Options().BatchTokens // shorter steps while others wait
		}
		end = min(off+step, to)
		if err := ectx.Decode(ctx, target.Tokens[off:end], off); err != nil {
			tape.logitsAt = -1
			tape.spans = ClipSpans(target.Spans, len(tape.tokens))
			return EngineErr(err)
		}
		tape.tokens = append(tape.tokens, target.Tokens[off:end]...)
		tape.logitsAt = len(tape.tokens)
	}
	d.env.Progress(ctx, "prefill", to-from, to-from)
	return nil
}

func (d *denseLayout) AppendTokens(ctx context.Context, toks []engine.Token) error {
	tape := d.tape
	if len(tape.tokens)+len(toks) > d.env.ContextTokens {
		return protocol.OverflowError{PromptTokens: int64(len(tape.tokens) + len(toks)), ContextTokens: int64(d.env.ContextTokens)}
	}
	if err := d.env.Engine.Decode(ctx, toks, len(tape.tokens)); err != nil {
		tape.logitsAt = -1
		return EngineErr(err)
	}
	tape.tokens = append(tape.tokens, toks...)
	tape.logitsAt = len(tape.tokens)
	return nil
}

func (d *denseLayout) Cut(_ context.Context, n int) (int, error) {
	if n >= len(d.tape.tokens) {
		return len(d.tape.tokens), nil
	}
	if _, err := d.env.Engine.Remove(n, -1); err != nil {
		return 0, EngineErr(err)
	}
	d.tape.Keep(n)
	return n, nil
}

func (d *denseLayout) Clear() error {
	if _, err := d.env.Engine.Remove(0, -1); err != nil {
		return EngineErr(err)
	}
	d.tape.Reset()
	return nil
}

func (d *denseLayout) Reset()             { d.tape.Reset() }
func (d *denseLayout) Release(bool, bool) {}

func (d *denseLayout) Explain(*pb.ExplainReply) [][2]int { return [][2]int{{0, len(d.tape.tokens)}} }

func (d *denseLayout) OrphanPrefixes([]engine.Token) []int { return nil }

func (d *denseLayout) AdoptOrphan(int, int) (int, int, error) {
	return 0, 0, fmt.Errorf("%w: a dense session has no parked blocks to adopt", protocol.ErrInternal)
}
