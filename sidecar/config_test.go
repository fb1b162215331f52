package sidecar

import (
	"errors"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// TestHotConfigComesFromPolicy: the hot-set limits, their defaults and
// their floor are policy.ResolveHotLimits'; NoSinks asks for no sinks; the
// evaluation knobs left the production Config (retrieval off is the
// scorer set "none").
func TestHotConfigComesFromPolicy(t *testing.T) {
	facts := engine.Facts{TrainedContext: 4096, CanShift: true}
	capa := policy.Capacity{MemoryTokens: 1 << 20}
	cfg := Config{HotTokens: 1024}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	hc, err := resolveHot(&cfg, facts, capa)
	want, _ := policy.ResolveHotLimits(policy.HotLimitsInput{HotTokens: 1024, TrainedContext: 4096})
	if err != nil || hc.Limits() != want || hc.Sinks != policy.DefaultSinkTokens || hc.Block != policy.DefaultHotBlockTokens || hc.Scorers != defaultScorers {
		t.Fatalf("defaults: %+v, %v; want %+v", hc, err, want)
	}
	cfg = Config{HotTokens: 1024, SinkTokens: NoSinks, Scorers: "none"}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	if hc, err := resolveHot(&cfg, facts, capa); err != nil || hc.Sinks != 0 || hc.Scorers != policy.ScorerNone {
		t.Fatalf("no sinks, no retrieval: %+v, %v", hc, err)
	}
	cfg = Config{HotTokens: 100}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	if _, err := resolveHot(&cfg, facts, capa); !errors.Is(err, ErrConfig) || !errors.Is(err, policy.ErrHotBudget) {
		t.Fatalf("below the floor: %v", err)
	}
	for _, bad := range []Config{{SinkTokens: -2}, {BlockTokens: -1}, {HotTokens: -3}, {ArenaBytes: -1}} {
		if err := bad.fill(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want ErrConfig", bad, err)
		}
	}
}
