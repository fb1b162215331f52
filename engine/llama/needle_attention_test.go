package llama

import (
	"math"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

// blockScores is, for query row, the largest q·k/√d over each block's
// tokens per (layer, head): [block][layer][head].
func blockScores(q policy.HeadVectors, row int, keys []policy.HeadVectors) [][][]float64 {
	group := q.Heads / keys[0].Heads
	out := make([][][]float64, len(keys))
	for b, k := range keys {
		out[b] = make([][]float64, q.Layers)
		for l := 0; l < q.Layers; l++ {
			out[b][l] = make([]float64, q.Heads)
			for h := 0; h < q.Heads; h++ {
				qv := q.Vec(row, l, h)
				best := math.Inf(-1)
				for r := 0; r < k.Rows; r++ {
					kv := k.Vec(r, l, h/group)
					var s float64
					for d := range qv {
						s += float64(qv[d]) * float64(kv[d])
					}
					best = max(best, s/math.Sqrt(float64(len(qv))))
				}
				out[b][l][h] = best
			}
		}
	}
	return out
}

// addScores adds b into a.
func addScores(a, b [][][]float64) {
	for i := range a {
		for l := range a[i] {
			for h := range a[i][l] {
				a[i][l][h] += b[i][l][h]
			}
		}
	}
}

// reRope applies the rotation of positions pos0… to v (a copy): the
// vectors as attention itself compares them.
func reRope(r rope, v policy.HeadVectors, pos0 int) policy.HeadVectors {
	out := v
	out.Data = append([]float32(nil), v.Data...)
	t := r.table(pos0, v.Rows)
	for row := 0; row < v.Rows; row++ {
		cs := t.cs[row*t.half*2 : (row+1)*t.half*2]
		for l := 0; l < v.Layers; l++ {
			for h := 0; h < v.Heads; h++ {
				x := out.Vec(row, l, h)
				for i := 0; i < t.half; i++ {
					a, b := 2*i, 2*i+1
					if r.kind == ropeNeox {
						a, b = i, i+t.half
					}
					c, s := cs[2*i], cs[2*i+1]
					x[a], x[b] = x[a]*c-x[b]*s, x[a]*s+x[b]*c
				}
			}
		}
	}
	return out
}

// TestAttentionFindsTheNeedleBlock measures whether the model's own
// vectors point at the block holding a needle: four blocks of random ids,
// one holding a 24-token needle, then the needle's first 4 tokens as the
// query (what eval recall asks). A block's score in a layer is the best
// head's largest q·k over the block's tokens, with the queries of the
// query's last token only, or summed over its 4 tokens; it logs in how
// many haystacks the needle block scores highest, per layer, with RoPE
// undone (what RangeKeys and DecodeCapture give) and, for comparison,
// with it applied (the logits attention computes). It asserts only what
// held with a wide margin: in the best layer, the needle block wins for
// most haystacks.
func TestAttentionFindsTheNeedleBlock(t *testing.T) {
	m := loadOnTestBackend(t, testmodel.Needle(t))
	f := m.Facts()
	rp, err := m.ropeParams()
	if err != nil {
		t.Fatal(err)
	}
	const (
		blocks    = 4
		blockToks = 56
		needleAt  = 13 // offset in its block
		trials    = 40
		askToks   = 4
	)
	type variant struct {
		name string
		wins []int // haystacks where the needle block wins, by layer
	}
	vs := []*variant{{name: "un-roped, last query token"}, {name: "un-roped, sum over the 4 query tokens"}, {name: "roped, last query token"}}
	for _, v := range vs {
		v.wins = make([]int, f.Layers)
	}
	for trial := 0; trial < trials; trial++ {
		c := newCtx(t, m, 256)
		hay := randomTokens(int64(100+trial), blocks*blockToks, f.VocabSize)
		needle := randomTokens(int64(1000+trial), 24, f.VocabSize)
		nb := trial % (blocks - 1) // never the last block, next to the query
		copy(hay[nb*blockToks+needleAt:], needle)
		if err := c.Decode(t.Context(), append([]engine.Token{f.BOS}, hay...), 0); err != nil {
			t.Fatal(err)
		}
		var keys, roped []policy.HeadVectors
		for b := 0; b < blocks; b++ {
			r, err := c.ExtractRange(1+b*blockToks, 1+(b+1)*blockToks)
			if err != nil {
				t.Fatal(err)
			}
			k, err := c.RangeKeys(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
			roped = append(roped, reRope(rp, k, r.Pos0))
		}
		qpos := 1 + blocks*blockToks
		q, err := c.DecodeCapture(t.Context(), needle[:askToks], qpos, askToks, nil)
		if err != nil {
			t.Fatal(err)
		}
		sum := blockScores(q, 0, keys)
		for r := 1; r < askToks; r++ {
			addScores(sum, blockScores(q, r, keys))
		}
		scores := [][][][]float64{blockScores(q, askToks-1, keys), sum, blockScores(reRope(rp, q, qpos), askToks-1, roped)}
		for i, sc := range scores {
			for l := 0; l < f.Layers; l++ {
				best := make([]float64, blocks)
				for b := range best {
					best[b] = math.Inf(-1)
					for _, s := range sc[b][l] {
						best[b] = max(best[b], s)
					}
				}
				won := true
				for b := range best {
					if b != nb && best[b] >= best[nb] {
						won = false
					}
				}
				if won {
					vs[i].wins[l]++
				}
			}
		}
	}
	for _, v := range vs {
		t.Logf("needle block scores highest (of %d blocks) in %v of %d haystacks by layer: %s", blocks, v.wins, trials, v.name)
	}
	bestWins := func(v *variant) (int, int) {
		bl := 0
		for l, w := range v.wins {
			if w > v.wins[bl] {
				bl = l
			}
		}
		return bl, v.wins[bl]
	}
	// Chance is 1 in 4; measured in layer 1: 36/40 (last token), 39/40
	// (sum), 40/40 roped.
	for _, c := range []struct {
		v    *variant
		need int
	}{{vs[0], trials / 2}, {vs[1], trials * 3 / 4}} {
		if l, w := bestWins(c.v); w < c.need {
			t.Fatalf("%s: in no layer does the needle block win %d of %d haystacks (best: layer %d, %d)", c.v.name, c.need, trials, l, w)
		}
	}
}
