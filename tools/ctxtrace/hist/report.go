package hist

import "math"

// ProbeReport is one histogram of a report.
type ProbeReport struct {
	Name    string         `json:"name"`
	What    string         `json:"what"`
	Count   uint64         `json:"count"`
	P50us   float64        `json:"p50_us"`
	P99us   float64        `json:"p99_us"`
	MeanUs  float64        `json:"mean_us"`
	Buckets []BucketReport `json:"buckets"` // the non-empty buckets, in order
}

// BucketReport is one non-empty log2 bucket: Count values in [LoUs, HiUs).
type BucketReport struct {
	LoUs  float64 `json:"lo_us"`
	HiUs  float64 `json:"hi_us"`
	Count uint64  `json:"count"`
}

// ProbeReportOf summarizes a histogram.
func ProbeReportOf(h Hist) ProbeReport {
	p := ProbeReport{Name: h.Name, What: h.What, Count: h.Count,
		P50us: round3(h.Quantile(0.50) / 1e3), P99us: round3(h.Quantile(0.99) / 1e3), MeanUs: round3(h.Mean() / 1e3),
		Buckets: []BucketReport{}}
	for k, c := range h.Buckets {
		if c > 0 {
			lo, hi := BucketBounds(k)
			p.Buckets = append(p.Buckets, BucketReport{LoUs: lo / 1e3, HiUs: hi / 1e3, Count: c})
		}
	}
	return p
}

// Dense spreads the non-empty buckets back over all NumBuckets and
// returns the first and last non-empty index.
func (p ProbeReport) Dense() (counts [NumBuckets]uint64, first, last int) {
	first = NumBuckets
	for _, bk := range p.Buckets {
		k := Bucket(uint64(math.Round(bk.LoUs * 1e3)))
		counts[k] += bk.Count
		first, last = min(first, k), max(last, k)
	}
	return counts, first, last
}

func round3(v float64) float64 { return math.Round(v*1e3) / 1e3 }
