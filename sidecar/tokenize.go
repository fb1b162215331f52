package sidecar

import (
	"fmt"
	"slices"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// Tokenization: a manifest's segments become the tokens and spans a
// session's tape is synchronised to (layout.sync).

// tokenizeSegments renders segments into tokens, BOS first when first is
// set. Each segment is tokenized on its own, so a segment's tokens never
// depend on its neighbours and reuse boundaries are stable.
func (srv *Server) tokenizeSegments(sess *session, segs []policy.Segment, first bool, pos0 int) (layout.Prompt, error) {
	var p layout.Prompt
	m := srv.slot.model
	if first && srv.slot.facts.AddBOS {
		p.Tokens = append(p.Tokens, srv.slot.facts.BOS)
		p.Spans = append(p.Spans, layout.Span{Seg: policy.Segment{ID: "<bos>", Kind: policy.KindSystem, Class: policy.ClassTaskPinned, Stable: true}, Start: pos0, End: pos0 + 1})
	}
	for _, seg := range segs {
		key := seg.Digest()
		toks, ok := sess.tokCache[key]
		if len(seg.Tokens) > 0 {
			vocab := int32(srv.slot.facts.VocabSize)
			for j, t := range seg.Tokens {
				if t >= vocab {
					return layout.Prompt{}, fmt.Errorf("%w: segment %q: token %d at %d is outside the vocabulary [0,%d)", protocol.ErrInvalidManifest, seg.ID, t, j, vocab)
				}
			}
			toks, ok = seg.Tokens, true
		}
		if !ok {
			var err error
			toks, err = tokenizeSegment(m, seg)
			if err != nil {
				return layout.Prompt{}, fmt.Errorf("%w: segment %q: %w", protocol.ErrInvalidManifest, seg.ID, err)
			}
			if len(sess.tokCache) > 8192 {
				clear(sess.tokCache)
			}
			sess.tokCache[key] = toks
		}
		start := pos0 + len(p.Tokens)
		p.Tokens = append(p.Tokens, toks...)
		meta := seg
		meta.Text, meta.Tokens, meta.Control = "", nil, nil
		p.Spans = append(p.Spans, layout.Span{Seg: meta, Start: start, End: pos0 + len(p.Tokens)})
	}
	return p, nil
}

// tokenizeSegment tokenizes one segment's text: its control spans with the
// model's special-token texts parsed, every other run with them left as
// text, so only the spans a chat template wrote become control tokens. A
// span whose text is no special token of this model (it tokenizes the same
// either way) stays part of the text around it, so a model without the
// template's control tokens gets exactly the tokens of its text.
func tokenizeSegment(m engine.Model, seg policy.Segment) ([]engine.Token, error) {
	if len(seg.Control) == 0 {
		return m.Tokenize(seg.Text, false)
	}
	var out []engine.Token
	run := 0 // start in seg.Text of the text not yet tokenized
	flush := func(end int) error {
		if end > run {
			toks, err := m.Tokenize(seg.Text[run:end], false)
			if err != nil {
				return err
			}
			out = append(out, toks...)
		}
		return nil
	}
	for _, c := range seg.Control {
		span := seg.Text[c.Start:c.End]
		special, err := m.TokenizeSpecial(span)
		if err != nil {
			return nil, err
		}
		plain, err := m.Tokenize(span, false)
		if err != nil {
			return nil, err
		}
		if slices.Equal(special, plain) {
			continue // no control token: text
		}
		if err := flush(c.Start); err != nil {
			return nil, err
		}
		out = append(out, special...)
		run = c.End
	}
	if err := flush(len(seg.Text)); err != nil {
		return nil, err
	}
	return out, nil
}
