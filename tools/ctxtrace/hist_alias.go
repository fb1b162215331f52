package ctxtrace

import (
	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/tools/ctxtrace/hist"
)

// The histogram types live in package hist (pure Go, so ctxctl can use
// them without the tracer); these names keep ctxtrace's API whole.
type (
	Hist         = hist.Hist
	ProbeReport  = hist.ProbeReport
	BucketReport = hist.BucketReport
)

// BucketBounds is bucket k's range [lo, hi) in nanoseconds.
func BucketBounds(k int) (lo, hi float64) { return hist.BucketBounds(k) }

// Bucket returns the bucket index of v nanoseconds.
func Bucket(v uint64) int { return hist.Bucket(v) }

// HistFromMetrics converts a Go-side timing of ctxd's Metrics reply.
func HistFromMetrics(w client.TimingHistogram) Hist { return hist.HistFromMetrics(w) }

// ProbeReportOf summarizes a histogram.
func ProbeReportOf(h Hist) ProbeReport { return hist.ProbeReportOf(h) }
