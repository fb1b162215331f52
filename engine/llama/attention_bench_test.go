package llama

import (
	"slices"
	"testing"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
)

// BenchmarkCaptureDecode64 decodes a 64-token batch into an empty context
// in four ways, interleaved (one of each per iteration, so that the load
// of a shared machine falls on all alike), and reports each way's median
// and minimum: "nocallback" without the graph callback at all,
// "disarmed" with it installed but disarmed (every Decode), "all"
// capturing every layer's queries of all 64 tokens, "one" capturing one
// layer's of the last token. One CPU thread: thread hand-offs would
// dominate models this small.
func BenchmarkCaptureDecode64(b *testing.B) {
	for _, mdl := range []struct{ name, path string }{{"stories", testmodel.Stories(b)}, {"needle", testmodel.Needle(b)}} {
		b.Run(mdl.name, func(b *testing.B) {
			m, err := Load(mdl.path)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			toks := randomTokens(1, 64, m.Facts().VocabSize)
			opts := engine.ContextOptions{ContextTokens: 256, BatchTokens: 64, Threads: 1}
			plain, err := m.newContextEval(opts, false)
			if err != nil {
				b.Fatal(err)
			}
			defer plain.Close()
			c, err := m.newContext(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ways := []struct {
				name string
				run  func() error
			}{
				{"nocallback", func() error { plain.Clear(); return plain.Decode(b.Context(), toks, 0) }},
				{"disarmed", func() error { c.Clear(); return c.Decode(b.Context(), toks, 0) }},
				{"all", func() error {
					c.Clear()
					_, err := c.DecodeCapture(b.Context(), toks, 0, 64, nil)
					return err
				}},
				{"one", func() error {
					c.Clear()
					_, err := c.DecodeCapture(b.Context(), toks, 0, 1, []int{0})
					return err
				}},
			}
			took := make([][]time.Duration, len(ways))
			for b.Loop() {
				for i, w := range ways {
					t0 := time.Now()
					if err := w.run(); err != nil {
						b.Fatal(err)
					}
					took[i] = append(took[i], time.Since(t0))
				}
			}
			for i, w := range ways {
				d := took[i]
				slices.Sort(d)
				b.ReportMetric(float64(d[len(d)/2].Microseconds()), w.name+"-med-µs")
				b.ReportMetric(float64(d[0].Microseconds()), w.name+"-min-µs")
			}
		})
	}
}

// BenchmarkRangeKeys256 reads every layer's keys of a 256-token range
// (f16 KV) and reports the range's bytes and the keys' float32 bytes.
func BenchmarkRangeKeys256(b *testing.B) {
	for _, mdl := range []struct{ name, path string }{{"stories", testmodel.Stories(b)}, {"needle", testmodel.Needle(b)}} {
		b.Run(mdl.name, func(b *testing.B) {
			m, err := Load(mdl.path)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			c, err := m.newContext(engine.ContextOptions{ContextTokens: 512, BatchTokens: 256, Threads: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Decode(b.Context(), randomTokens(2, 256, m.Facts().VocabSize), 100); err != nil {
				b.Fatal(err)
			}
			r, err := c.ExtractRange(100, 356)
			if err != nil {
				b.Fatal(err)
			}
			var keyBytes int
			for b.Loop() {
				v, err := c.RangeKeys(r, nil)
				if err != nil {
					b.Fatal(err)
				}
				keyBytes = 4 * len(v.Data)
			}
			b.ReportMetric(float64(len(r.Blob)), "blob-bytes")
			b.ReportMetric(float64(keyBytes), "key-bytes")
		})
	}
}
