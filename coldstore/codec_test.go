package coldstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestPlanesRoundTrip(t *testing.T) {
	for _, stride := range []int{1, 2, 4, 8} {
		for _, n := range []int{0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 1001, 4099} {
			src := randomBytes(n, uint64(n*10+stride))
			planes := make([]byte, n)
			splitPlanes(planes, src, stride)
			// byte p of element i is at planes[p*m+i]
			m := n / stride
			for i := 0; i < m; i++ {
				for p := 0; p < stride; p++ {
					if planes[p*m+i] != src[i*stride+p] {
						t.Fatalf("stride %d n %d: plane %d elem %d wrong", stride, n, p, i)
					}
				}
			}
			if !bytes.Equal(planes[m*stride:], src[m*stride:]) {
				t.Fatalf("stride %d n %d: tail differs", stride, n)
			}
			back := make([]byte, n)
			mergePlanes(back, planes, stride)
			if !bytes.Equal(back, src) {
				t.Fatalf("stride %d n %d: merge differs", stride, n)
			}
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	c, err := newCodec(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	ctx := context.Background()
	for _, chunk := range []int{1 << 12, defaultChunkRaw} {
		c.chunkRaw = chunk
		for _, stride := range []int{1, 2, 4, 8} {
			for _, n := range []int{0, 1, 3, 4097, 3*chunk + 5, 2 * chunk} {
				for kind, src := range map[string][]byte{
					"f16":    kvLikeF16(n, uint64(n)),
					"f32":    kvLikeF32(n, uint64(n)),
					"random": randomBytes(n, uint64(n)),
					"zeros":  make([]byte, n),
				} {
					name := fmt.Sprintf("chunk%d/stride%d/n%d/%s", chunk, stride, n, kind)
					payload, table := c.compress(src, stride)
					if len(payload) > len(src) {
						t.Fatalf("%s: payload %d > raw %d", name, len(payload), len(src))
					}
					out := make([]byte, n)
					if err := c.decompress(ctx, out, payload, table, chunk, stride); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !bytes.Equal(out, src) {
						t.Fatalf("%s: round trip differs", name)
					}
					if kind == "zeros" && n > 4096 && len(payload) > n/20 {
						t.Fatalf("%s: zeros compressed to %d of %d", name, len(payload), n)
					}
				}
			}
		}
	}
	c.chunkRaw = defaultChunkRaw
}

func TestCodecRejectsDamage(t *testing.T) {
	c, err := newCodec(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	c.chunkRaw = 1 << 14
	src := kvLikeF16(1<<16+3, 9)
	payload, table := c.compress(src, 2)
	out := make([]byte, len(src))
	ctx := context.Background()
	// A table that does not cover the payload.
	bad := append([]uint32(nil), table...)
	bad[0]++
	if err := c.decompress(ctx, out, payload, bad, 1<<14, 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("bad table: %v", err)
	}
	// Wrong raw length.
	if err := c.decompress(ctx, out[:len(out)-1], payload, table, 1<<14, 2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short out: %v", err)
	}
	// A damaged compressed frame (find a compressed plane and break its
	// frame magic).
	for k, e := range table {
		if e&rawChunkFlag != 0 {
			continue
		}
		off := 0
		for _, x := range table[:k] {
			off += int(x &^ rawChunkFlag)
		}
		dam := append([]byte(nil), payload...)
		dam[off] ^= 0xff
		if err := c.decompress(ctx, out, dam, table, 1<<14, 2); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("damaged frame: %v", err)
		}
		break
	}
}

// TestCompressionShape checks what the planes buy on f16-like KV: the
// noise (low) planes are stored, the exponent planes compressed, and the
// whole is smaller than plain zstd of the interleaved bytes.
func TestCompressionShape(t *testing.T) {
	c, err := newCodec(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	src := kvLikeF16(1<<20, 5)
	p2, t2 := c.compress(src, 2)
	p1, _ := c.compress(src, 1)
	if len(p2) >= len(p1) {
		t.Fatalf("planes %d bytes, no planes %d: planes should win", len(p2), len(p1))
	}
	if r := float64(len(p2)) / float64(len(src)); r > 0.92 {
		t.Fatalf("f16 planes ratio %.3f", r)
	}
	for k := 0; k < len(t2); k += 2 {
		if t2[k]&rawChunkFlag == 0 {
			t.Fatalf("chunk %d: low plane compressed (%d bytes), expected stored", k/2, t2[k])
		}
		if t2[k+1]&rawChunkFlag != 0 {
			t.Fatalf("chunk %d: exponent plane stored raw", k/2)
		}
	}
}

func TestMeasureThroughput(t *testing.T) {
	ctx := context.Background()
	tp, err := MeasureThroughput(ctx, 2, kvLikeF16(1<<20, 3))
	if err != nil {
		t.Fatal(err)
	}
	if tp.CompressBytesPerSec <= 0 || tp.DecompressBytesPerSec <= 0 || tp.Ratio <= 0 || tp.Ratio > 1 {
		t.Fatalf("implausible %+v", tp)
	}
	t.Logf("f16 1 MiB: compress %.0f MB/s, decompress %.0f MB/s, ratio %.3f",
		tp.CompressBytesPerSec/1e6, tp.DecompressBytesPerSec/1e6, tp.Ratio)
	if _, err := MeasureThroughput(ctx, 3, []byte{1, 2, 3}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("stride 3: %v", err)
	}
	if _, err := MeasureThroughput(ctx, 2, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := MeasureThroughput(cctx, 2, []byte{1, 2}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}
