package policy

import (
	"math/rand"
	"strings"
	"testing"
)

func TestPlanRestore(t *testing.T) {
	fast := RestoreInput{BlockTokens: []int{64, 64, 64}, UptoTokens: 1000, KVBytesPerToken: 1000,
		ReadBytesPerSec: 1e9, DecompressBytesPerSec: 1e9, PrefillTokensPerSec: 100}
	if p := PlanRestore(fast); p.Blocks != 3 || p.Tokens != 192 || !strings.HasPrefix(p.Choice, "restore:") {
		t.Errorf("fast SSD: %+v", p)
	}
	upto := fast
	upto.UptoTokens = 100 // the third block starts past it
	if p := PlanRestore(upto); p.Blocks != 2 || p.Tokens != 128 {
		t.Errorf("upto 100: %+v", p)
	}
	slow := fast
	slow.ReadBytesPerSec, slow.PrefillTokensPerSec = 1e3, 1e6
	if p := PlanRestore(slow); p.Blocks != 0 || !strings.HasPrefix(p.Choice, "recompute: restoring 64 tokens") {
		t.Errorf("slow SSD: %+v", p)
	}
	unknown := fast
	unknown.ReadBytesPerSec = 0 // an unknown restore cost counts as free
	if p := PlanRestore(unknown); p.Blocks != 3 {
		t.Errorf("unknown read throughput: %+v", p)
	}
	if p := PlanRestore(RestoreInput{}); p.Blocks != 0 || p.Tokens != 0 {
		t.Errorf("nothing to restore: %+v", p)
	}
	// The cost model's named inputs: 64 tokens × 1000 B, 9/10 stored.
	if got, want := RestoreSeconds(64000, EstimatedStoredBytes(64000), 1e6, 2e6), 57600/1e6+64000/2e6; got != want {
		t.Errorf("RestoreSeconds = %v, want %v", got, want)
	}
	if RestoreSeconds(1, 1, 0, 1) != 0 || RecomputeSeconds(64, 0) != 1e9 || RecomputeSeconds(64, 32) != 2 {
		t.Error("unknown throughputs")
	}
}

// Restored blocks are a prefix whose every block was cheaper to restore;
// the next one, when still wanted, was not.
func TestPlanRestoreProperties(t *testing.T) {
	r := rand.New(rand.NewSource(13))
	for range 3000 {
		in := RestoreInput{UptoTokens: r.Intn(2000), KVBytesPerToken: int64(1 + r.Intn(100000)),
			ReadBytesPerSec: float64(r.Intn(3)) * 1e8 * r.Float64(), DecompressBytesPerSec: 1e9 * r.Float64(),
			PrefillTokensPerSec: float64(r.Intn(3)) * 1e4 * r.Float64()}
		for range r.Intn(30) {
			in.BlockTokens = append(in.BlockTokens, 1+r.Intn(128))
		}
		p := PlanRestore(in)
		cost := func(n int) (float64, float64) {
			raw := int64(n) * in.KVBytesPerToken
			return RestoreSeconds(raw, EstimatedStoredBytes(raw), in.ReadBytesPerSec, in.DecompressBytesPerSec), RecomputeSeconds(n, in.PrefillTokensPerSec)
		}
		tokens := 0
		for _, n := range in.BlockTokens[:p.Blocks] {
			if rs, rc := cost(n); rs >= rc {
				t.Fatalf("restored a block costing %v ≥ %v", rs, rc)
			}
			tokens += n
		}
		if tokens != p.Tokens || p.Blocks > 0 && tokens-in.BlockTokens[p.Blocks-1] >= in.UptoTokens {
			t.Fatalf("%+v: tokens %d", p, tokens)
		}
		if p.Blocks < len(in.BlockTokens) && tokens < in.UptoTokens {
			if rs, rc := cost(in.BlockTokens[p.Blocks]); rs < rc {
				t.Fatalf("stopped before a cheap block: %+v", p)
			}
		}
	}
}
