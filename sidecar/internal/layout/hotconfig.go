package layout

import "github.com/ctxd/ctxd/policy"

// HotConfig is the resolved hot-set configuration of the loaded model.
type HotConfig struct {
	Budget, Window, Limit int
	Block, Sinks, Recent  int
	Reserve               int              // room kept after a turn's new tokens for decoding
	Scorers               policy.ScorerSet // policy.ScorerNone: retrieval off
	NoShift               bool             // the model cannot shift: hot set off, dense fallback
}

// Limits are hc's token limits as policy sees them.
func (hc HotConfig) Limits() policy.HotLimits {
	return policy.HotLimits{Budget: hc.Budget, Window: hc.Window, Limit: hc.Limit, Block: hc.Block,
		Sinks: hc.Sinks, Recent: hc.Recent, Reserve: hc.Reserve}
}

// WithLimits returns hc with the token limits l (policy.ResolveHotLimits).
func (hc HotConfig) WithLimits(l policy.HotLimits) HotConfig {
	hc.Budget, hc.Window, hc.Limit, hc.Block = l.Budget, l.Window, l.Limit, l.Block
	hc.Sinks, hc.Recent, hc.Reserve = l.Sinks, l.Recent, l.Reserve
	return hc
}
