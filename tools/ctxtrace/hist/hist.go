// Package hist holds ctxd's log2 timing histograms and their JSON
// summaries: pure Go, no eBPF, so the operator's ctxctl can print the
// daemon's Go-side timings without linking the tracer (tools/ctxtrace
// re-exports these names).
package hist

import (
	"math"
	"math/bits"

	"github.com/ctxd/ctxd/client"
)

// NumBuckets mirrors NBUCKETS in tools/ctxtrace's eBPF C source.
const NumBuckets = 64

// Hist is a log2 histogram of nanoseconds: Buckets[k] counts values v with
// 2^k <= v < 2^(k+1) (bucket 0 also holds 0).
type Hist struct {
	Name    string
	What    string
	Count   uint64
	SumNs   float64
	Buckets [NumBuckets]uint64
}

// BucketBounds is bucket k's range [lo, hi) in nanoseconds.
func BucketBounds(k int) (lo, hi float64) {
	if k == 0 {
		return 0, 2
	}
	return math.Ldexp(1, k), math.Ldexp(1, k+1)
}

// Bucket returns the bucket index of v nanoseconds.
func Bucket(v uint64) int {
	if v == 0 {
		return 0
	}
	return 63 - bits.LeadingZeros64(v)
}

// Add records one value of v nanoseconds.
func (h *Hist) Add(v uint64) {
	h.Buckets[Bucket(v)]++
	h.Count++
	h.SumNs += float64(v)
}

// Quantile estimates the q-quantile (0 ≤ q ≤ 1) in nanoseconds,
// interpolating linearly inside the bucket that holds it; 0 when empty.
func (h Hist) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	target := q * float64(h.Count)
	var cum float64
	for k, c := range h.Buckets {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= target {
			lo, hi := BucketBounds(k)
			frac := (target - cum) / float64(c)
			return lo + (hi-lo)*frac
		}
		cum += float64(c)
	}
	// Counts below Count (a histogram read while it moved): the top.
	for k := NumBuckets - 1; k >= 0; k-- {
		if h.Buckets[k] > 0 {
			_, hi := BucketBounds(k)
			return hi
		}
	}
	return 0
}

// Mean is the average value in nanoseconds (0 when empty).
func (h Hist) Mean() float64 {
	if h.Count == 0 {
		return 0
	}
	return h.SumNs / float64(h.Count)
}

// Sub returns h minus an earlier reading of the same histogram: what
// happened between the two. Counters that went backwards (a restarted
// daemon) give h itself.
func (h Hist) Sub(old Hist) Hist {
	if old.Count > h.Count {
		return h
	}
	out := h
	out.Count -= old.Count
	out.SumNs = max(h.SumNs-old.SumNs, 0)
	for k := range out.Buckets {
		if old.Buckets[k] > h.Buckets[k] {
			return h
		}
		out.Buckets[k] -= old.Buckets[k]
	}
	return out
}

// HistFromMetrics converts a Go-side timing of ctxd's Metrics reply.
func HistFromMetrics(w client.TimingHistogram) Hist {
	h := Hist{Name: w.Name, What: whatGoSide(w.Name), Count: w.Count, SumNs: w.SumNs}
	for k, c := range w.Buckets {
		if k < NumBuckets {
			h.Buckets[k] = c
		}
	}
	return h
}

// whatGoSide describes a Go-side timing by its name prefix.
func whatGoSide(name string) string {
	switch {
	case len(name) > 12 && name[:12] == "fetch_phase.":
		return "Go-side timing of fetch phase " + name[12:]
	case len(name) > 6 && name[:6] == "fetch.":
		return "Go-side time to read a block from tier " + name[6:]
	case len(name) > 8 && name[:8] == "request.":
		return "Go-side time to serve " + name[8:] + " calls"
	case name == "cold_read":
		return "Go-side SSD-tier read time"
	case name == "cold_write":
		return "Go-side SSD-tier write time"
	}
	return "Go-side timing"
}
