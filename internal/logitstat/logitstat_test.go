package logitstat

import (
	"math"
	"testing"
)

func TestSoftmaxAndKL(t *testing.T) {
	p := Softmax([]float32{1, 2, 3, 1000})
	var s float64
	for _, x := range p {
		s += x
	}
	if math.Abs(s-1) > 1e-12 || p[3] < 0.999 {
		t.Fatalf("softmax %v sums to %v", p, s)
	}
	if d := KL(p, p); d != 0 {
		t.Fatalf("KL(p, p) = %v", d)
	}
	q := Softmax([]float32{3, 2, 1, 1000})
	if d := KL(Softmax([]float32{0, 0}), Softmax([]float32{0, 1})); d <= 0 || math.IsInf(d, 0) {
		t.Fatalf("KL of different distributions = %v", d)
	}
	if d := KL(p, q); d < 0 || math.IsNaN(d) {
		t.Fatalf("KL = %v", d)
	}
}
