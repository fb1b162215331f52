package policy

import (
	"fmt"
	"math"
	"slices"
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
// must stay small beside the KV it stands for: 1/16 adds 6 % to a block's
// arena cost. For an f16 cache that is one layer in six of the block's
// keys at 4 bits (its K and V rows in every layer cost 4 bytes an
// element; a summary key 4 bits and a 4-byte scale), so a model of up to
// 6 layers keeps every key of its middle layer, and deeper models more
// layers.
const DefaultKeySummaryFraction = 1.0 / 16

// KeySummaryPlan says what a block's key summary holds.
type KeySummaryPlan struct {
	// Layers are the summarised layers, ascending.
	Layers []int
	// Reps is the number of keys kept per layer and KV head: the block's
	// size when every key is kept (in token order), fewer when the budget
	// buys less than one whole layer (then the mean and the most
	// distinctive keys, SummarizeKeys).
	Reps int
	// Bytes is one block's summary: len(Layers) × KVHeads × Reps vectors
	// of KeyVectorBytes(HeadDim).
	Bytes int64
}

// KeyVectorBytes is the memory of one summarised key of dim components:
// 4 bits each, two to a byte, and a float32 scale.
func KeyVectorBytes(dim int) int64 { return int64((dim+1)/2 + 4) }

// PlanKeySummary derives a block's key summary from the model's shape, the
// block size, the KV cache type and the share of the block's KV bytes the
// summary may take (fraction, within (0, 1]; DefaultKeySummaryFraction).
// It keeps every key of as many layers as the budget buys, a band around
// the middle of the depth (where retrieval heads are found; in
// needle.gguf layer 1 of 3 is the one whose queries find the needle);
// when not even one layer fits, as many keys per KV head of the middle
// layer as fit, and at least one.
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
	perHead := KeyVectorBytes(shape.HeadDim) * int64(shape.KVHeads) // one key of every KV head of one layer
	layers, reps := int(min(int64(shape.Layers), budget/(perHead*int64(blockTokens)))), blockTokens
	if layers < 1 {
		layers, reps = 1, int(max(1, budget/perHead))
	}
	p := KeySummaryPlan{Layers: spreadLayers(shape.Layers, layers), Reps: reps}
	p.Bytes = int64(layers) * perHead * int64(reps)
	return p, nil
}

// spreadLayers picks k of n layers, a band around the middle of the
// depth (the middle, then one deeper, one shallower, and so on), in
// ascending order: 1 of 3 is layer 1, 2 of 3 layers 1 and 2.
func spreadLayers(n, k int) []int {
	out := make([]int, 0, k)
	for i := 0; len(out) < k; i++ {
		l := n/2 + (i+1)/2
		if i%2 == 0 {
			l = n/2 - i/2
		}
		if l >= 0 && l < n {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// KeySummary is one block's kept keys: for each summarised layer and KV
// head, Reps vectors of Dim components, vector v = (layer*Heads+head)*Reps
// + rep (layer indexes KeySummaryPlan.Layers) stored as 4-bit codes c in
// Codes[v*stride:] (two to a byte, low nibble first; stride (Dim+1)/2)
// with Scales[v]: component = (c − 8) × Scales[v].
type KeySummary struct {
	Layers, Heads, Reps, Dim int
	Codes                    []byte
	Scales                   []float32
}

// Bytes is the summary's memory.
func (s KeySummary) Bytes() int64 { return int64(len(s.Codes)) + 4*int64(len(s.Scales)) }

// Key decodes vector (layer, head, rep) into dst (len Dim).
func (s KeySummary) Key(dst []float32, layer, head, rep int) {
	v := (layer*s.Heads+head)*s.Reps + rep
	stride := (s.Dim + 1) / 2
	codes, sc := s.Codes[v*stride:(v+1)*stride], s.Scales[v]
	d := 0
	for _, c := range codes[:s.Dim/2] {
		dst[d] = float32(int(c&15)-8) * sc
		dst[d+1] = float32(int(c>>4)-8) * sc
		d += 2
	}
	if d < s.Dim {
		dst[d] = float32(int(codes[d/2]&15)-8) * sc
	}
}

// put quantises key into vector v: absmax scaling onto −7…7.
func (s KeySummary) put(v int, key []float32) {
	var top float32
	for _, x := range key {
		top = max(top, x, -x)
	}
	stride := (s.Dim + 1) / 2
	codes := s.Codes[v*stride : (v+1)*stride]
	clear(codes)
	s.Scales[v] = top / 7
	if top == 0 {
		for d := range key {
			codes[d/2] |= 8 << (4 * (d % 2))
		}
		return
	}
	for d, x := range key {
		c := byte(int(math.Round(float64(x/top*7))) + 8)
		codes[d/2] |= c << (4 * (d % 2))
	}
}

// SummarizeKeys keeps reps keys of a block per layer and KV head out of
// keys (one row per token, RoPE undone), 4-bit quantised: with reps ≥ the
// block's tokens every key in token order (the last repeated to fill);
// with fewer, their mean, then the keys farthest from every one kept so
// far (farthest point sampling, ties to the earlier token), so that the
// keys unlike the rest of the block — the ones a query looking for
// something specific finds — are kept, as InfLLM keeps a block's most
// distinctive tokens. Empty or malformed keys give an error wrapping
// ErrInvalidHotSet.
func SummarizeKeys(keys HeadVectors, reps int) (KeySummary, error) {
	if err := keys.Validate(); err != nil {
		return KeySummary{}, fmt.Errorf("%w: %w", ErrInvalidHotSet, err)
	}
	if keys.Rows == 0 || keys.Layers == 0 || keys.Heads == 0 || keys.Dim == 0 || reps < 1 {
		return KeySummary{}, fmt.Errorf("%w: summarising %d keys of %d layers × %d heads × %d into %d representatives",
			ErrInvalidHotSet, keys.Rows, keys.Layers, keys.Heads, keys.Dim, reps)
	}
	vectors := keys.Layers * keys.Heads * reps
	s := KeySummary{Layers: keys.Layers, Heads: keys.Heads, Reps: reps, Dim: keys.Dim,
		Codes: make([]byte, vectors*((keys.Dim+1)/2)), Scales: make([]float32, vectors)}
	dist := make([]float64, keys.Rows)
	mean := make([]float32, keys.Dim)
	for l := 0; l < keys.Layers; l++ {
		for g := 0; g < keys.Heads; g++ {
			v0 := (l*keys.Heads + g) * reps
			if reps >= keys.Rows {
				for k := 0; k < reps; k++ {
					s.put(v0+k, keys.Vec(min(k, keys.Rows-1), l, g))
				}
				continue
			}
			sum := make([]float64, keys.Dim)
			for r := 0; r < keys.Rows; r++ {
				for d, v := range keys.Vec(r, l, g) {
					sum[d] += float64(v)
				}
			}
			for d := range mean {
				mean[d] = float32(sum[d] / float64(keys.Rows))
			}
			s.put(v0, mean)
			for r := range dist {
				dist[r] = sqDist(keys.Vec(r, l, g), mean)
			}
			for k := 1; k < reps; k++ {
				pick := 0
				for r := 1; r < len(dist); r++ {
					if dist[r] > dist[pick] {
						pick = r
					}
				}
				rep := keys.Vec(pick, l, g)
				s.put(v0+k, rep)
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
