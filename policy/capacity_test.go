package policy

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// storiesFacts is stories260K: 640 bytes per token at f16.
var storiesFacts = ModelFacts{Layers: 5, KVHeads: 4, HeadDim: 8, TrainedContext: 512, WeightsBytes: 100_000}

// storiesInput builds an input with 100 kB of overhead and room for tokens tokens.
func storiesInput(tokens int64, modelMax, requested int) CapacityInput {
	return CapacityInput{
		Facts:           storiesFacts,
		UsableBytes:     100_000 + 100_000 + tokens*640 + 639,
		OverheadBytes:   100_000,
		MemoryKind:      MemoryDevice,
		ModelMaxTokens:  modelMax,
		RequestedTokens: requested,
	}
}

func TestPlanCapacity(t *testing.T) {
	tests := []struct {
		name                 string
		in                   CapacityInput
		memory, eff, context int64
		clamped              bool
		reason, warning      string // prefixes / substrings; "" for warning means none
	}{
		{"clamped by memory", storiesInput(1000, 2048, 0), 1000, 1000, 1000, true, "memory", ""},
		{"bounded by model maximum", storiesInput(5000, 2048, 0), 5000, 2048, 2048, false, "model maximum", ""},
		{"memory equals model maximum", storiesInput(2048, 2048, 0), 2048, 2048, 2048, false, "model maximum", ""},
		{"requested within both", storiesInput(5000, 2048, 512), 5000, 2048, 512, false, "model maximum", ""},
		{"requested within memory-bound", storiesInput(1000, 2048, 1000), 1000, 1000, 1000, true, "memory", ""},
		{"requested exceeds model maximum", storiesInput(5000, 2048, 4096), 5000, 2048, 4096, false, "model maximum", "exceed the model maximum of 2048"},
		{"model maximum from trained context", storiesInput(5000, 0, 0), 5000, 512, 512, false, "model maximum", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := PlanCapacity(tc.in)
			if err != nil {
				t.Fatalf("PlanCapacity: %v", err)
			}
			if c.KVBytesPerToken != 640 {
				t.Errorf("KVBytesPerToken = %d, want 640", c.KVBytesPerToken)
			}
			if c.MemoryTokens != tc.memory || c.EffectiveTokens != tc.eff || c.ContextTokens != tc.context {
				t.Errorf("memory/effective/context = %d/%d/%d, want %d/%d/%d",
					c.MemoryTokens, c.EffectiveTokens, c.ContextTokens, tc.memory, tc.eff, tc.context)
			}
			if c.Clamped != tc.clamped {
				t.Errorf("Clamped = %v, want %v", c.Clamped, tc.clamped)
			}
			if !strings.HasPrefix(c.Reason, tc.reason) {
				t.Errorf("Reason = %q, want prefix %q", c.Reason, tc.reason)
			}
			if tc.warning == "" && c.Warning != "" || !strings.Contains(c.Warning, tc.warning) {
				t.Errorf("Warning = %q, want %q", c.Warning, tc.warning)
			}
			if c.MemoryKind != MemoryDevice || c.OverheadBytes != 100_000 || c.WeightsBytes != 100_000 || c.UsableBytes != tc.in.UsableBytes {
				t.Errorf("echoed fields wrong: %+v", c)
			}
		})
	}
}

func TestPlanCapacityInsufficientMemory(t *testing.T) {
	tests := []struct {
		name   string
		in     CapacityInput
		memory int64
		msg    string
	}{
		{"requested exceeds memory", storiesInput(1000, 2048, 1001), 1000, "1001 requested tokens"},
		{"requested exceeds memory and model max", storiesInput(1000, 512, 4096), 1000, "room for 1000 tokens"},
		{"weights exceed usable", CapacityInput{Facts: storiesFacts, UsableBytes: 50_000, OverheadBytes: 1, ModelMaxTokens: 512}, 0, "exceed"},
		{"weights plus overhead exceed usable", CapacityInput{Facts: storiesFacts, UsableBytes: 150_000, OverheadBytes: 60_000, ModelMaxTokens: 512}, 0, "exceed"},
		{"room for less than a token", storiesInput(0, 2048, 0), 0, "less than one token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := PlanCapacity(tc.in)
			if !errors.Is(err, ErrInsufficientMemory) {
				t.Fatalf("err = %v, want ErrInsufficientMemory", err)
			}
			if errors.Is(err, ErrInvalidCapacityInput) {
				t.Errorf("err also matches ErrInvalidCapacityInput")
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to contain %q", err, tc.msg)
			}
			if c.MemoryTokens != tc.memory || c.KVBytesPerToken != 640 {
				t.Errorf("diagnostic capacity = %+v, want MemoryTokens %d", c, tc.memory)
			}
		})
	}
}

func TestPlanCapacityInvalid(t *testing.T) {
	good := storiesInput(1000, 2048, 0)
	tests := []struct {
		name string
		mod  func(*CapacityInput)
	}{
		{"zero layers", func(in *CapacityInput) { in.Facts.Layers = 0 }},
		{"negative KV heads", func(in *CapacityInput) { in.Facts.KVHeads = -1 }},
		{"zero head dim", func(in *CapacityInput) { in.Facts.HeadDim = 0 }},
		{"negative trained context", func(in *CapacityInput) { in.Facts.TrainedContext = -1 }},
		{"negative weights", func(in *CapacityInput) { in.Facts.WeightsBytes = -1 }},
		{"unknown KV type", func(in *CapacityInput) { in.KVType = 7 }},
		{"zero usable", func(in *CapacityInput) { in.UsableBytes = 0 }},
		{"unknown memory kind", func(in *CapacityInput) { in.MemoryKind = "gpu" }},
		{"negative overhead", func(in *CapacityInput) { in.OverheadBytes = -1 }},
		{"negative model max", func(in *CapacityInput) { in.ModelMaxTokens = -1 }},
		{"no model max", func(in *CapacityInput) { in.ModelMaxTokens = 0; in.Facts.TrainedContext = 0 }},
		{"negative requested", func(in *CapacityInput) { in.RequestedTokens = -1 }},
		{"overflowing dimensions", func(in *CapacityInput) {
			in.Facts.Layers, in.Facts.KVHeads, in.Facts.HeadDim = math.MaxInt32, math.MaxInt32, math.MaxInt32
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := good
			tc.mod(&in)
			c, err := PlanCapacity(in)
			if !errors.Is(err, ErrInvalidCapacityInput) {
				t.Fatalf("err = %v, want ErrInvalidCapacityInput", err)
			}
			if c != (Capacity{}) {
				t.Errorf("capacity = %+v, want zero", c)
			}
		})
	}
}

func TestPlanCapacityDefaults(t *testing.T) {
	const gib = 1 << 30
	in := CapacityInput{
		Facts:          ModelFacts{Layers: 36, KVHeads: 8, HeadDim: 128, TrainedContext: 262144, WeightsBytes: 16 * gib},
		UsableBytes:    40 * gib,
		ModelMaxTokens: 262144,
	}
	c, err := PlanCapacity(in)
	if err != nil {
		t.Fatal(err)
	}
	wantOverhead := int64(64<<20) + 40*gib/20
	if c.OverheadBytes != wantOverhead || DefaultOverhead(40*gib) != wantOverhead {
		t.Errorf("OverheadBytes = %d, want %d", c.OverheadBytes, wantOverhead)
	}
	if c.MemoryKind != MemoryHost {
		t.Errorf("MemoryKind = %q, want host", c.MemoryKind)
	}
	wantMem := (40*gib - 16*gib - wantOverhead) / 147456
	if c.MemoryTokens != wantMem || c.EffectiveTokens != wantMem || c.ContextTokens != wantMem || !c.Clamped {
		t.Errorf("capacity = %+v, want %d memory-bound tokens", c, wantMem)
	}
	if !strings.HasPrefix(c.Reason, "memory") || !strings.Contains(c.Reason, "262144") {
		t.Errorf("Reason = %q", c.Reason)
	}
	if DefaultOverhead(0) != 64<<20 || DefaultOverhead(math.MaxInt64) <= 0 {
		t.Errorf("DefaultOverhead edge cases wrong")
	}
	for _, u := range []int64{1, 19, 20, 99, 101, 12345678901} {
		if got, want := DefaultOverhead(u), int64(64<<20)+u/20; got != want {
			t.Errorf("DefaultOverhead(%d) = %d, want %d", u, got, want)
		}
	}
}

func FuzzPlanCapacity(f *testing.F) {
	f.Add(5, 4, 8, 512, int64(100_000), 0, int64(1<<20), int64(0), 0, 0)
	f.Add(36, 8, 128, 262144, int64(16<<30), 1, int64(100<<30), int64(1), 262144, 300000)
	f.Fuzz(func(t *testing.T, layers, heads, dim, trained int, weights int64, kt int, usable, overhead int64, modelMax, req int) {
		in := CapacityInput{
			Facts:  ModelFacts{Layers: layers, KVHeads: heads, HeadDim: dim, TrainedContext: trained, WeightsBytes: weights},
			KVType: KVType(kt), UsableBytes: usable, OverheadBytes: overhead,
			ModelMaxTokens: modelMax, RequestedTokens: req,
		}
		c, err := PlanCapacity(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidCapacityInput) && !errors.Is(err, ErrInsufficientMemory) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if c.ContextTokens <= 0 || c.ContextTokens > c.MemoryTokens || c.EffectiveTokens > c.ModelMaxTokens ||
			c.EffectiveTokens > c.MemoryTokens {
			t.Fatalf("inconsistent capacity %+v", c)
		}
		if need := BytesForTokens(c.ContextTokens, c.KVBytesPerToken); need > c.UsableBytes-c.WeightsBytes-c.OverheadBytes {
			t.Fatalf("context %d needs %d bytes, more than available: %+v", c.ContextTokens, need, c)
		}
	})
}

func TestDecodeThreads(t *testing.T) {
	if got := DecodeThreads(1<<20, 8); got != 1 {
		t.Fatalf("small model: %d threads", got)
	}
	if got := DecodeThreads(4<<30, 8); got != 8 {
		t.Fatalf("large model: %d threads", got)
	}
	if got := DecodeThreads(4<<30, 0); got != 1 {
		t.Fatalf("no cpus: %d threads", got)
	}
}
