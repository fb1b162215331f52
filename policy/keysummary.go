package policy

import (
	"fmt"
	"math"
)

// AttentionShape is a model's attention geometry: Heads query heads share
// KVHeads key/value heads (grouped-query attention: query head h reads KV
// head h / (Heads/KVHeads)), each vector HeadDim wide, in Layers layers.
type AttentionShape struct {
	Layers, Heads, KVHeads, HeadDim int
}

func (s AttentionShape) validate() error {
	if s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("%w: attention shape %d layers, %d heads, %d KV heads, head size %d (all positive, heads a multiple of KV heads)",
			ErrInvalidHotSet, s.Layers, s.Heads, s.KVHeads, s.HeadDim)
	}
	return nil
}

// DefaultKeySummaryFraction is the share of a block's own KV bytes its key
// summary may take: 1/16. A summary lives in host memory for every parked
// block, whether its KV is in the arena or only on the SSD tier, so it
// must stay small beside the KV it stands for; 1/16 adds 6 % to a block's
// arena cost and, for an f16 cache, buys 4 keys per layer and KV head of a
// 64-token block (a summary is f32, K only: 4 f32 keys cost what 64 f16
// K and V rows cost divided by 16), enough for the mean and three
// spread-out keys. Larger blocks and wider caches get more keys.
const DefaultKeySummaryFraction = 1.0 / 16

// minKeySummaryReps is the fewest keys a summarised layer keeps per KV
// head before PlanKeySummary drops layers instead: the mean and one
// outlier.
const minKeySummaryReps = 2

// KeySummaryPlan says what a block's key summary holds.
type KeySummaryPlan struct {
	// Layers are the summarised layers, ascending.
	Layers []int
	// Reps is the number of representative keys per layer and KV head.
	Reps int
	// Bytes is one block's summary: len(Layers) × KVHeads × Reps × HeadDim
	// float32s.
	Bytes int64
}

// PlanKeySummary derives a block's key summary from the model's shape, the
// block size, the KV cache type and the share of the block's KV bytes the
// summary may take (fraction, within (0, 1]; DefaultKeySummaryFraction).
// Every layer is kept with as many keys per KV head as the budget buys
// (at most blockTokens); when that is fewer than two, two are kept in as
// many layers as fit, spread evenly over the depth (at least one layer,
// and one key when even that does not fit).
func PlanKeySummary(shape AttentionShape, blockTokens int, kv KVType, fraction float64) (KeySummaryPlan, error) {
	if err := shape.validate(); err != nil {
		return KeySummaryPlan{}, err
	}
	if blockTokens <= 0 || !(fraction > 0 && fraction <= 1) {
		return KeySummaryPlan{}, fmt.Errorf("%w: key summary of %d-token blocks with fraction %g (want positive tokens, fraction within (0, 1])",
			ErrInvalidHotSet, blockTokens, fraction)
	}
	perToken := KVBytesPerToken(shape.Layers, shape.KVHeads, shape.HeadDim, kv)
	if perToken == 0 {
		return KeySummaryPlan{}, fmt.Errorf("%w: KV type %v", ErrInvalidHotSet, kv)
	}
	budget := int64(math.Floor(fraction * float64(perToken) * float64(blockTokens)))
	perKeyLayer := int64(shape.KVHeads) * int64(shape.HeadDim) * 4 // one key per KV head of one layer, f32
	layers, reps := shape.Layers, int(budget/(perKeyLayer*int64(shape.Layers)))
	if reps < minKeySummaryReps {
		reps = minKeySummaryReps
		layers = int(min(int64(shape.Layers), budget/(perKeyLayer*minKeySummaryReps)))
		if layers < 1 {
			layers, reps = 1, int(max(1, min(minKeySummaryReps, budget/perKeyLayer)))
		}
	}
	reps = min(reps, blockTokens)
	p := KeySummaryPlan{Layers: spreadLayers(shape.Layers, layers), Reps: reps}
	p.Bytes = int64(layers) * perKeyLayer * int64(reps)
	return p, nil
}

// spreadLayers picks k of n layers spread evenly over the depth, each at
// the centre of its share: 1 of 3 is layer 1, 2 of 4 are layers 1 and 3.
func spreadLayers(n, k int) []int {
	out := make([]int, k)
	for j := range out {
		out[j] = (2*j + 1) * n / (2 * k)
	}
	return out
}

// KeySummary is one block's representative keys: for each summarised
// layer and KV head, Reps vectors of Dim float32s, in Data at
//
//	Data[((layer*Heads+head)*Reps+rep)*Dim+d]
//
// (layer indexes KeySummaryPlan.Layers).
type KeySummary struct {
	Layers, Heads, Reps, Dim int
	Data                     []float32
}

// Bytes is the summary's memory.
func (s KeySummary) Bytes() int64 { return int64(len(s.Data)) * 4 }

// SummarizeKeys keeps reps representative keys of a block per layer and
// KV head out of keys (one row per token, RoPE undone): their mean, then
// the keys farthest from every representative chosen so far (farthest
// point sampling, ties to the earlier token), so that the keys unlike the
// rest of the block — the ones a query looking for something specific
// finds — are kept, as InfLLM keeps a block's most distinctive tokens. A
// block of fewer tokens than reps − 1 repeats its last pick. Empty or
// malformed keys give an error wrapping ErrInvalidHotSet.
func SummarizeKeys(keys HeadVectors, reps int) (KeySummary, error) {
	if err := keys.Validate(); err != nil {
		return KeySummary{}, fmt.Errorf("%w: %w", ErrInvalidHotSet, err)
	}
	if keys.Rows == 0 || keys.Layers == 0 || keys.Heads == 0 || keys.Dim == 0 || reps < 1 {
		return KeySummary{}, fmt.Errorf("%w: summarising %d keys of %d layers × %d heads × %d into %d representatives",
			ErrInvalidHotSet, keys.Rows, keys.Layers, keys.Heads, keys.Dim, reps)
	}
	s := KeySummary{Layers: keys.Layers, Heads: keys.Heads, Reps: reps, Dim: keys.Dim,
		Data: make([]float32, keys.Layers*keys.Heads*reps*keys.Dim)}
	dist := make([]float64, keys.Rows)
	mean := make([]float64, keys.Dim)
	for l := 0; l < keys.Layers; l++ {
		for g := 0; g < keys.Heads; g++ {
			out := s.Data[(l*keys.Heads+g)*reps*keys.Dim:][:reps*keys.Dim]
			clear(mean)
			for r := 0; r < keys.Rows; r++ {
				for d, v := range keys.Vec(r, l, g) {
					mean[d] += float64(v)
				}
			}
			for d := range mean {
				mean[d] /= float64(keys.Rows)
				out[d] = float32(mean[d])
			}
			for r := range dist {
				dist[r] = sqDist(keys.Vec(r, l, g), out[:keys.Dim])
			}
			for k := 1; k < reps; k++ {
				pick := 0
				for r := 1; r < len(dist); r++ {
					if dist[r] > dist[pick] {
						pick = r
					}
				}
				rep := out[k*keys.Dim : (k+1)*keys.Dim]
				copy(rep, keys.Vec(pick, l, g))
				for r := range dist {
					dist[r] = min(dist[r], sqDist(keys.Vec(r, l, g), rep))
				}
			}
		}
	}
	return s, nil
}

func sqDist(a, b []float32) float64 {
	var s float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		s += d * d
	}
	return s
}
