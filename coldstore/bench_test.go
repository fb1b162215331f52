package coldstore

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// benchBlockBytes is a KV block of a mid-size model: 64 tokens of a
// 32-layer, 8-KV-head, 128-dim f16 cache is 64·2·32·8·128·2 = 8 MiB.
const benchBlockBytes = 8 << 20

// kvSampleEnv names a file of real KV bytes (f16, e.g. a llama.cpp
// sequence state) to benchmark as well.
const kvSampleEnv = "CTXD_COLDSTORE_KV_SAMPLE"

type benchCase struct {
	name   string
	stride int
	data   []byte
}

func benchCases(b *testing.B) []benchCase {
	f16 := kvLikeF16(benchBlockBytes, 1)
	cases := []benchCase{
		{"f16/planes", 2, f16},
		{"f16/noplanes", 1, f16},
		{"f32/planes", 4, kvLikeF32(benchBlockBytes, 1)},
	}
	if p := os.Getenv(kvSampleEnv); p != "" {
		real, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		cases = append(cases, benchCase{"realkv/planes", 2, real}, benchCase{"realkv/noplanes", 1, real})
	}
	return cases
}

// processCPU is the CPU time this process has used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPURate adds "MB/cpu-s": megabytes per CPU-second since start, a
// rate other processes on a shared machine do not distort (MB/s is wall
// clock). On an idle machine, decompression's wall rate approaches
// MB/cpu-s times the cores used.
func reportCPURate(b *testing.B, start time.Duration, bytesPerOp int) {
	if cpu := processCPU() - start; cpu > 0 {
		b.ReportMetric(float64(b.N)*float64(bytesPerOp)/cpu.Seconds()/1e6, "MB/cpu-s")
	}
}

// BenchmarkCompress reports compression MB/s (raw bytes) and ratio =
// compressed/raw, on one compressor as a background worker runs it, for
// the level in use (fastest) and SpeedDefault.
func BenchmarkCompress(b *testing.B) {
	for _, tc := range benchCases(b) {
		for _, lv := range []struct {
			name  string
			level zstd.EncoderLevel
		}{{"fastest", zstd.SpeedFastest}, {"default", zstd.SpeedDefault}} {
			b.Run(tc.name+"/"+lv.name, func(b *testing.B) {
				c, err := newCodecLevel(lv.level, 1, 1)
				if err != nil {
					b.Fatal(err)
				}
				defer c.close()
				payload, _ := c.compress(tc.data, tc.stride) // warm the encoder up
				b.SetBytes(int64(len(tc.data)))
				cpu := processCPU()
				for b.Loop() {
					payload, _ = c.compress(tc.data, tc.stride)
				}
				reportCPURate(b, cpu, len(tc.data))
				b.ReportMetric(float64(len(payload))/float64(len(tc.data)), "ratio")
			})
		}
	}
}

// BenchmarkDecompress reports decompression MB/s (raw bytes) with the
// chunks spread over every core, as Get does.
func BenchmarkDecompress(b *testing.B) {
	for _, tc := range benchCases(b) {
		b.Run(tc.name, func(b *testing.B) {
			c, err := newCodec(1, 2*runtimeProcs())
			if err != nil {
				b.Fatal(err)
			}
			defer c.close()
			payload, table := c.compress(tc.data, tc.stride)
			out := make([]byte, len(tc.data))
			if err := c.decompress(context.Background(), out, payload, table, c.chunkRaw, tc.stride); err != nil { // warm up
				b.Fatal(err)
			}
			b.SetBytes(int64(len(tc.data)))
			cpu := processCPU()
			for b.Loop() {
				if err := c.decompress(context.Background(), out, payload, table, c.chunkRaw, tc.stride); err != nil {
					b.Fatal(err)
				}
			}
			reportCPURate(b, cpu, len(tc.data))
			if string(out) != string(tc.data) {
				b.Fatal("round trip differs")
			}
			b.ReportMetric(float64(len(payload))/float64(len(tc.data)), "ratio")
		})
	}
}

// BenchmarkStoreGet is a whole Get of an 8 MiB f16 block from a file in
// the page cache: read, both CRCs, decompression.
func BenchmarkStoreGet(b *testing.B) {
	s, _ := openStore(b, Config{Dir: b.TempDir()})
	blk := makeBlock(1, benchBlockBytes)
	mustPut(b, s, blk)
	b.SetBytes(benchBlockBytes)
	for b.Loop() {
		if _, _, err := s.Get(context.Background(), blk.key); err != nil {
			b.Fatal(err)
		}
	}
	st := s.Stats()
	b.ReportMetric(float64(st.Bytes)/float64(st.RawBytes), "ratio")
}

// BenchmarkStorePut is a whole synchronous Put of an 8 MiB f16 block
// (compression, write, fsync, rename); each iteration a new key.
func BenchmarkStorePut(b *testing.B) {
	s, _ := openStore(b, Config{Dir: b.TempDir()})
	blk := makeBlock(1, benchBlockBytes)
	b.SetBytes(benchBlockBytes)
	i := 0
	for b.Loop() {
		i++
		k := makeBlock(i+1000, 0).key
		if err := s.Put(context.Background(), k, blk.meta, blk.blob); err != nil {
			b.Fatal(err)
		}
	}
}
