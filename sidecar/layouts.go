package sidecar

import (
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// layoutEnv describes the loaded model to sess's new layout; the caller
// holds the slot token.
func (srv *Server) layoutEnv(sess *session) *layout.Env {
	s := srv.slot
	return &layout.Env{
		Engine: s.ectx, Tiers: srv.tiers, Counters: srv.metrics, Hot: &s.hot,
		ContextTokens: s.contextTokens(), KVBytesPerToken: s.facts.KVBytesPerToken(srv.cfg.KVType), KVType: s.kvType(),
		Attention:     policy.AttentionShape{Layers: s.facts.Layers, Heads: s.facts.Heads, KVHeads: s.facts.KVHeads, HeadDim: s.facts.HeadDim},
		SessionTokens: s.sessionTokens, NewBlockID: s.newBlockID,
		RestoreRates: func() (float64, float64, float64) {
			return s.fig.readBPS, s.fig.decompressBPS(), s.fig.prefillTokensPerSec
		},
		Yield:         func() error { return srv.yield(sess) },
		Contended:     func() bool { waiting, _ := s.token.contended(); return waiting },
		Progress:      reportProgress,
		WantsProgress: wantsProgress,
		Reuse:         srv.reuseSettings,
	}
}

// reuseSettings are the segment-reuse mode and the figures it weighs: the
// measured prefill cost (the fitted model in hot-set mode, else one
// token's measured time) and the latency target.
func (srv *Server) reuseSettings() layout.ReuseSettings {
	s := srv.slot
	set := layout.ReuseSettings{Mode: srv.cfg.Reuse, Cost: s.fig.cost, CopySecondsPerToken: s.copyPerToken}
	if !s.fig.hasCost && s.fig.prefillTokensPerSec > 0 {
		set.Cost = policy.PrefillCost{BaseSeconds: 1 / s.fig.prefillTokensPerSec}
	}
	lat := srv.cfg.ReuseLatency
	if lat == 0 {
		lat = srv.cfg.TurnLatency
	}
	set.LatencySeconds = lat.Seconds()
	return set
}

// newLayout is the layout a session opened on the loaded model gets: a
// hot set when the model runs one, else dense.
func (srv *Server) newLayout(sess *session) layout.Layout {
	env := srv.layoutEnv(sess)
	if srv.slot.hot.Budget > 0 {
		return layout.NewHotSet(env, &sess.tape, sess.id)
	}
	return layout.NewDense(env, &sess.tape)
}
