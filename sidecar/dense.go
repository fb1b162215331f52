package sidecar

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
	env  *layoutEnv
	sess *session
}

func (d *denseLayout) mode() string   { return "dense" }
func (d *denseLayout) maxTokens() int { return d.env.contextTokens }

func (d *denseLayout) sync(ctx context.Context, target prompt, needLogits, keepTail, _ bool) (syncResult, error) {
	sess := d.sess
	r := syncResult{promptTokens: len(target.tokens)}
	limit := d.env.contextTokens
	if len(target.tokens) > limit {
		return r, protocol.OverflowError{PromptTokens: int64(len(target.tokens)), ContextTokens: int64(limit)}
	}
	lcp := sess.reusablePrefix(target.tokens)
	r.reusable = lcp
	keep := lcp
	if keep == len(target.tokens) {
		if keepTail && !needLogits {
			r.reused = keep
			return r, nil
		}
		if needLogits && keep > 0 && sess.logitsAt != keep {
			keep-- // recompute the last token for its logits
		}
	}
	if keep < len(sess.tape) {
		n, err := d.env.ectx.Remove(keep, -1)
		if err != nil {
			return r, fmt.Errorf("%w: %w", protocol.ErrInternal, err)
		}
		r.dropped = n
		sess.keepTape(keep)
	}
	if err := d.prefill(ctx, target, keep); err != nil {
		return r, err
	}
	r.reused = keep
	r.prefilled = len(target.tokens) - keep
	// Adopt target's spans for the tokens it covers.
	sess.spans = target.spans
	return r, nil
}

// prefill decodes target.tokens[from:] in chunks, extending the tape as
// each chunk lands so a cancellation keeps what was done.
func (d *denseLayout) prefill(ctx context.Context, target prompt, from int) error {
	sess, ectx := d.sess, d.env.ectx
	chunk := ectx.Options().BatchTokens * 4
	if wantsProgress(ctx) {
		chunk = ectx.Options().BatchTokens
	}
	for off, end := from, from; off < len(target.tokens); off = end {
		reportProgress(ctx, "prefill", off-from, len(target.tokens)-from)
		step := chunk
		if off > from {
			// Between chunks other sessions' calls get their turns; the
			// spans say what the tape holds so far.
			sess.spans = clipSpans(target.spans, len(sess.tape))
			if err := d.env.yield(sess); err != nil {
				return err
			}
		}
		if d.env.contended() {
			step = ectx.Options().BatchTokens // shorter steps while others wait
		}
		end = min(off+step, len(target.tokens))
		if err := ectx.Decode(ctx, target.tokens[off:end], off); err != nil {
			sess.logitsAt = -1
			sess.spans = clipSpans(target.spans, len(sess.tape))
			return engineErr(err)
		}
		sess.tape = append(sess.tape, target.tokens[off:end]...)
		sess.logitsAt = len(sess.tape)
	}
	reportProgress(ctx, "prefill", len(target.tokens)-from, len(target.tokens)-from)
	return nil
}

func (d *denseLayout) appendTokens(ctx context.Context, toks []engine.Token) error {
	sess := d.sess
	if len(sess.tape)+len(toks) > d.env.contextTokens {
		return protocol.OverflowError{PromptTokens: int64(len(sess.tape) + len(toks)), ContextTokens: int64(d.env.contextTokens)}
	}
	if err := d.env.ectx.Decode(ctx, toks, len(sess.tape)); err != nil {
		sess.logitsAt = -1
		return engineErr(err)
	}
	sess.tape = append(sess.tape, toks...)
	sess.logitsAt = len(sess.tape)
	return nil
}

func (d *denseLayout) cut(n int) (int, error) {
	if n >= len(d.sess.tape) {
		return len(d.sess.tape), nil
	}
	if _, err := d.env.ectx.Remove(n, -1); err != nil {
		return 0, engineErr(err)
	}
	d.sess.keepTape(n)
	return n, nil
}

func (d *denseLayout) clear() error {
	if _, err := d.env.ectx.Remove(0, -1); err != nil {
		return engineErr(err)
	}
	d.sess.resetTape()
	return nil
}

func (d *denseLayout) reset()       { d.sess.resetTape() }
func (d *denseLayout) release(bool) {}

func (d *denseLayout) explain(*pb.ExplainReply) [][2]int { return [][2]int{{0, len(d.sess.tape)}} }

func (d *denseLayout) orphanPrefixes([]engine.Token) []int { return nil }

func (d *denseLayout) adoptOrphan(int, int) (int, int, error) {
	return 0, 0, fmt.Errorf("%w: a dense session has no parked blocks to adopt", protocol.ErrInternal)
}
