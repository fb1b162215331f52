package ctxtrace

import (
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
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

// HistFromWire converts a Go-side timing of ctxd's Metrics reply.
func HistFromWire(w *pb.TimingHistogram) Hist { return hist.HistFromWire(w) }

// ProbeReportOf summarizes a histogram.
func ProbeReportOf(h Hist) ProbeReport { return hist.ProbeReportOf(h) }
