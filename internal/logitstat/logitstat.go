// Package logitstat compares next-token distributions: a softmax of
// logits and the Kullback–Leibler divergence between two of them, as the
// reuse evaluation and the engine's KV-move tests measure fidelity.
package logitstat

import "math"

// Softmax returns the probabilities of logits, computed in float64 after
// subtracting the largest logit.
func Softmax(logits []float32) []float64 {
	m := math.Inf(-1)
	for _, x := range logits {
		m = math.Max(m, float64(x))
	}
	p := make([]float64, len(logits))
	var s float64
	for i, x := range logits {
		p[i] = math.Exp(float64(x) - m)
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// KL returns KL(p‖q) in nats, never below 0 (rounding can leave a tiny
// negative sum); q's probabilities are floored at 1e-300 so an underflowed
// q stays finite. p and q have the same length.
func KL(p, q []float64) float64 {
	var d float64
	for i := range p {
		if p[i] > 0 {
			d += p[i] * math.Log(p[i]/math.Max(q[i], 1e-300))
		}
	}
	return max(d, 0)
}
