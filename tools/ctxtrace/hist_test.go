package ctxtrace

import (
	"github.com/ctxd/ctxd/client"
	"math"
	"testing"
)

func TestBucketEdges(t *testing.T) {
	cases := []struct {
		v    uint64
		want int
	}{{0, 0}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {1023, 9}, {1024, 10}, {1 << 40, 40}, {math.MaxUint64, 63}}
	for _, c := range cases {
		if got := Bucket(c.v); got != c.want {
			t.Errorf("Bucket(%d) = %d, want %d", c.v, got, c.want)
		}
		lo, hi := BucketBounds(c.want)
		if float64(c.v) < lo || (float64(c.v) >= hi && c.v != math.MaxUint64) {
			t.Errorf("%d outside bucket %d = [%g, %g)", c.v, c.want, lo, hi)
		}
	}
}

func TestQuantileInterpolatesInsideBuckets(t *testing.T) {
	var h Hist
	// 100 values in [1024, 2048): the median sits half way through.
	for i := 0; i < 100; i++ {
		h.Add(1024 + uint64(i)*10)
	}
	if got := h.Quantile(0.5); got != 1536 {
		t.Fatalf("p50 = %g, want 1536 (middle of [1024, 2048))", got)
	}
	if got := h.Quantile(0); got != 1024 {
		t.Fatalf("p0 = %g, want the bucket's lower edge 1024", got)
	}
	if got := h.Quantile(1); got != 2048 {
		t.Fatalf("p100 = %g, want the bucket's upper edge 2048", got)
	}
	// 99 fast values and one slow one: p50 stays fast, p99 is the last
	// fast one's bucket top, p99.5 reaches into the slow bucket.
	var g Hist
	for i := 0; i < 99; i++ {
		g.Add(100) // bucket 6: [64, 128)
	}
	g.Add(1_000_000) // bucket 19
	if p50 := g.Quantile(0.5); p50 < 64 || p50 >= 128 {
		t.Fatalf("p50 = %g, want inside [64, 128)", p50)
	}
	if p99 := g.Quantile(0.99); p99 != 128 {
		t.Fatalf("p99 = %g, want 128 (99 of 100 values are below)", p99)
	}
	lo, hi := BucketBounds(19)
	if p := g.Quantile(0.995); p < lo || p >= hi {
		t.Fatalf("p99.5 = %g, want inside the slow bucket [%g, %g)", p, lo, hi)
	}
	if m := g.Mean(); math.Abs(m-(99*100+1e6)/100) > 1e-9 {
		t.Fatalf("mean = %g", m)
	}
	var empty Hist
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Fatal("an empty histogram has no quantiles")
	}
}

func TestSubGivesTheWindow(t *testing.T) {
	var before, after Hist
	before.Add(10)
	after = before
	after.Add(5000)
	after.Add(5001)
	d := after.Sub(before)
	if d.Count != 2 || d.Buckets[Bucket(10)] != 0 || d.Buckets[Bucket(5000)] != 2 || d.SumNs != 10001 {
		t.Fatalf("window = %+v", d)
	}
	// A restarted daemon (counters went down): the new reading as is.
	if r := before.Sub(after); r.Count != before.Count {
		t.Fatalf("a reset counter must not wrap: %+v", r)
	}
}

func TestHistFromMetrics(t *testing.T) {
	w := client.TimingHistogram{Name: "fetch_phase.arena_lookup", Count: 3, SumNs: 3000, Buckets: make([]uint64, 64)}
	w.Buckets[9], w.Buckets[10] = 1, 2
	h := HistFromMetrics(w)
	if h.Count != 3 || h.Buckets[10] != 2 || h.What == "" {
		t.Fatalf("%+v", h)
	}
	p := ProbeReportOf(h)
	if p.Count != 3 || len(p.Buckets) != 2 || p.Buckets[0].LoUs != 0.512 || p.Buckets[1].HiUs != 2.048 {
		t.Fatalf("report %+v", p)
	}
	if p.P50us <= 1.024 || p.P50us >= 2.048 {
		t.Fatalf("p50 %g µs, want inside bucket 10", p.P50us)
	}
}
