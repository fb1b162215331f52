package policy

import "fmt"

// FusionMethod says how FuseScores combines several scorers' rankings of
// the same blocks into the one PlanHotSet admits from, within the one
// retrieval budget.
type FusionMethod int

const (
	// FuseMaxNormalized sums each scorer's scores divided by that
	// scorer's best (CombSUM over max-normalised scores): a block both
	// scorers rank high wins, and a scorer that is sure (its best far
	// above the rest) outweighs one that is not. Default.
	FuseMaxNormalized FusionMethod = iota
	// FuseReciprocalRank sums 1/(ReciprocalRankK + rank) over the
	// scorers that rank a block with a positive score (Cormack et al.'s
	// reciprocal-rank fusion): scales are ignored, only ranks count.
	FuseReciprocalRank
)

// ReciprocalRankK is reciprocal-rank fusion's usual constant.
const ReciprocalRankK = 60

// DefaultFusion is the fusion ctxd uses for the "both" scorer set, chosen
// by measurement (docs/BENCHMARKS.md, "Recall").
const DefaultFusion = FuseMaxNormalized

func (m FusionMethod) String() string {
	switch m {
	case FuseMaxNormalized:
		return "max-normalized"
	case FuseReciprocalRank:
		return "reciprocal-rank"
	}
	return fmt.Sprintf("FusionMethod(%d)", int(m))
}

// FuseScores combines rankings (each as a Scorer returns them) into one,
// sorted by descending score then ascending ID. A block absent from a
// ranking, or scored ≤ 0 there, gets nothing from it; a ranking whose best
// score is ≤ 0 is ignored. Every block of any ranking appears once.
func FuseScores(m FusionMethod, runs ...[]BlockScore) []BlockScore {
	acc := map[uint64]float64{}
	for _, run := range runs {
		top := 0.0
		for _, s := range run {
			top = max(top, s.Score)
			acc[s.ID] += 0
		}
		if !(top > 0) {
			continue
		}
		// Ranks over the positive scores, best first; equal scores share
		// the better rank so the result does not depend on their order.
		rank, prev := 0, 0.0
		for i, s := range run {
			if !(s.Score > 0) {
				continue
			}
			if i == 0 || s.Score != prev {
				rank = i + 1
			}
			prev = s.Score
			switch m {
			case FuseReciprocalRank:
				acc[s.ID] += 1 / float64(ReciprocalRankK+rank)
			default:
				acc[s.ID] += s.Score / top
			}
		}
	}
	out := make([]BlockScore, 0, len(acc))
	for id, s := range acc {
		out = append(out, BlockScore{ID: id, Score: s})
	}
	sortScores(out)
	return out
}
