package coldstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"
)

// defaultChunkRaw is how many raw bytes one independently compressed chunk
// holds. Chunks let Get decompress one block on several cores and bound
// the scratch memory of a decompression; it is a multiple of every stride.
const defaultChunkRaw = 1 << 18

// maxChunkRaw bounds the chunk size a block header may declare.
const maxChunkRaw = 64 << 20

// rawChunkFlag marks a chunk table entry whose chunk is stored as is
// (not split, not compressed) because compressing did not make it smaller.
const rawChunkFlag = 1 << 31

// codec turns a KV blob into a chunked, byte-plane-split, zstd-compressed
// payload and back. It holds one encoder and one decoder (each safe for
// concurrent use, each with its own pool of internal states), so their
// tables are reused across blocks. A codec is safe for concurrent use.
type codec struct {
	enc      *zstd.Encoder
	dec      *zstd.Decoder
	parallel int       // goroutines one decompression may use
	chunkRaw int       // raw bytes per chunk when compressing
	scratch  sync.Pool // *[]byte of chunkRaw bytes
}

// codecLevel is the zstd level blocks are written with. Compression runs
// in background workers, off the decode path, so its speed matters less
// than size. On 1,000 tokens of stories260K f16 KV (trajectory text):
// SpeedFastest 0.852 of raw at ≈ 130 MB/s, SpeedDefault 0.856,
// SpeedBetterCompression 0.832 at ≈ 30–55 MB/s, SpeedBestCompression
// 0.816 at ≈ 4 MB/s (too slow for snapshots of long sessions).
// Decompression runs at the same speed for all of them.
const codecLevel = zstd.SpeedBetterCompression

// newCodec makes a codec whose encoder serves up to encoders concurrent
// compressions and whose decoder serves up to decoders concurrent chunk
// decompressions.
func newCodec(encoders, decoders int) (*codec, error) {
	return newCodecLevel(codecLevel, encoders, decoders)
}

func newCodecLevel(level zstd.EncoderLevel, encoders, decoders int) (*codec, error) {
	encoders = max(encoders, 1)
	decoders = max(decoders, 1)
	enc, err := zstd.NewWriter(nil,
		zstd.WithEncoderLevel(level),
		zstd.WithEncoderConcurrency(encoders),
		zstd.WithEncoderCRC(false), // the file has its own CRC32C
		zstd.WithAllLitEntropyCompression(true),
		zstd.WithWindowSize(defaultChunkRaw),
	)
	if err != nil {
		return nil, fmt.Errorf("coldstore: zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(decoders),
		zstd.IgnoreChecksum(true),
		zstd.WithDecodeAllCapLimit(true), // a chunk can never decode past its slot
		zstd.WithDecoderMaxMemory(maxChunkRaw),
	)
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("coldstore: zstd decoder: %w", err)
	}
	return &codec{enc: enc, dec: dec, parallel: decoders, chunkRaw: defaultChunkRaw}, nil
}

func (c *codec) close() {
	c.enc.Close()
	c.dec.Close()
}

func (c *codec) getScratch(n int) (*[]byte, []byte) {
	if n > c.chunkRaw {
		b := make([]byte, n)
		return nil, b
	}
	p, _ := c.scratch.Get().(*[]byte)
	if p == nil {
		b := make([]byte, c.chunkRaw)
		p = &b
	}
	return p, (*p)[:n]
}

func (c *codec) putScratch(p *[]byte) {
	if p != nil {
		c.scratch.Put(p)
	}
}

// chunkCount is how many chunks a blob of rawLen bytes is cut into.
func chunkCount(rawLen int64, chunkRaw int) int {
	return int((rawLen + int64(chunkRaw) - 1) / int64(chunkRaw))
}

// compress cuts blob into c.chunkRaw chunks, splits each chunk into
// byte planes of the given stride and compresses every plane as its own
// zstd frame. A plane is stored as is (its table entry has rawChunkFlag)
// when compressing does not save at least 1/32 of it: the low planes of
// f16 KV are noise, and a plane kept raw costs nothing to restore. It
// returns the concatenated planes followed by the len(blob)%stride tail
// bytes, and one table entry per (chunk, plane): the stored length. The
// payload is never longer than blob.
func (c *codec) compress(blob []byte, stride int) (payload []byte, table []uint32) {
	nch := chunkCount(int64(len(blob)), c.chunkRaw)
	table = make([]uint32, 0, nch*stride)
	margin := c.enc.MaxEncodedSize(c.chunkRaw) - c.chunkRaw + 64*stride
	payload = make([]byte, 0, len(blob)+margin)
	var sp *[]byte
	var scratch []byte
	if stride > 1 {
		sp, scratch = c.getScratch(min(len(blob), c.chunkRaw))
		defer c.putScratch(sp)
	}
	for i := range nch {
		chunk := blob[i*c.chunkRaw : min(len(blob), (i+1)*c.chunkRaw)]
		planes := chunk
		if stride > 1 {
			planes = scratch[:len(chunk)]
			splitPlanes(planes, chunk, stride)
		}
		n := len(chunk) / stride
		for p := range stride {
			plane := planes[p*n : (p+1)*n]
			start := len(payload)
			if n > 0 {
				payload = c.enc.EncodeAll(plane, payload)
			}
			if n == 0 || len(payload)-start > n-n/32 {
				payload = append(payload[:start], plane...)
				table = append(table, uint32(n)|rawChunkFlag)
				continue
			}
			table = append(table, uint32(len(payload)-start))
		}
	}
	payload = append(payload, blob[len(blob)-len(blob)%stride:]...)
	return payload, table
}

// decompress restores len(out) raw bytes from payload into out. Chunks are
// decoded in parallel when there are several. A stride-1 chunk decodes
// straight into out; split planes decode into scratch and are merged into
// out in one pass, raw planes being read in place from the payload. Any
// inconsistency is an ErrCorrupt.
func (c *codec) decompress(ctx context.Context, out, payload []byte, table []uint32, chunkRaw, stride int) error {
	if checkElemBytes(stride) != nil {
		return fmt.Errorf("%w: element size %d", ErrCorrupt, stride)
	}
	if chunkRaw <= 0 || chunkRaw > maxChunkRaw || chunkRaw%stride != 0 {
		return fmt.Errorf("%w: chunk size %d", ErrCorrupt, chunkRaw)
	}
	nch := chunkCount(int64(len(out)), chunkRaw)
	if len(table) != nch*stride {
		return fmt.Errorf("%w: %d table entries, want %d", ErrCorrupt, len(table), nch*stride)
	}
	offs := make([]int, len(table)+1)
	for k, e := range table {
		offs[k+1] = offs[k] + int(e&^rawChunkFlag)
	}
	tail := len(out) % stride
	if offs[len(table)]+tail != len(payload) {
		return fmt.Errorf("%w: chunk table covers %d payload bytes of %d", ErrCorrupt, offs[len(table)]+tail, len(payload))
	}
	one := func(i int) error {
		dst := out[i*chunkRaw : min(len(out), (i+1)*chunkRaw)]
		n := len(dst) / stride
		var planes [maxStride][]byte
		var sp *[]byte
		var scratch []byte
		defer func() { c.putScratch(sp) }()
		direct := false // the single plane was decoded straight into dst
		for p := range stride {
			k := i*stride + p
			src := payload[offs[k]:offs[k+1]]
			if table[k]&rawChunkFlag != 0 {
				if len(src) != n {
					return fmt.Errorf("%w: stored plane %d of chunk %d has %d bytes, want %d", ErrCorrupt, p, i, len(src), n)
				}
				planes[p] = src
				continue
			}
			var target []byte
			if stride == 1 {
				target = dst[:0:n]
				direct = true
			} else {
				if scratch == nil {
					sp, scratch = c.getScratch(n * stride)
				}
				target = scratch[p*n : p*n : (p+1)*n]
			}
			got, err := c.dec.DecodeAll(src, target)
			if err != nil {
				return fmt.Errorf("%w: plane %d of chunk %d: %w", ErrCorrupt, p, i, err)
			}
			if len(got) != n {
				return fmt.Errorf("%w: plane %d of chunk %d decoded to %d bytes, want %d", ErrCorrupt, p, i, len(got), n)
			}
			if n > 0 && &got[0] != &target[:1][0] {
				return fmt.Errorf("%w: plane %d of chunk %d decoded outside its slot", ErrCorrupt, p, i)
			}
			planes[p] = got
		}
		if direct {
			return nil
		}
		var tailBytes []byte
		if i == nch-1 {
			tailBytes = payload[len(payload)-tail:]
		}
		mergeFrom(dst, planes[:stride], tailBytes)
		return nil
	}
	workers := min(c.parallel, nch)
	if workers <= 1 {
		for i := range nch {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= nch {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = one(i)
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(nch)) // stop the others early
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Throughput is what MeasureThroughput measured on this machine: raw
// (uncompressed) bytes per second through compression and decompression,
// and Ratio = compressed size / raw size (smaller is better).
type Throughput struct {
	CompressBytesPerSec   float64
	DecompressBytesPerSec float64
	Ratio                 float64
}

// measureMinDuration is how long MeasureThroughput times each direction
// at least (it also makes at least two passes).
const measureMinDuration = 150 * time.Millisecond

// MeasureThroughput compresses and decompresses sample in-process, with
// the same codec settings a Store uses (elemBytes is the byte-plane
// stride: 1, 2, 4 or 8), and reports the rates and the ratio. The sidecar
// calls it at startup with a sample of real KV to decide whether
// restoring a block from the SSD beats recomputing it. It checks that the
// round trip is exact. Bad arguments are ErrInvalidArgument.
func MeasureThroughput(ctx context.Context, elemBytes int, sample []byte) (Throughput, error) {
	if err := checkElemBytes(elemBytes); err != nil {
		return Throughput{}, err
	}
	if len(sample) == 0 {
		return Throughput{}, fmt.Errorf("%w: empty sample", ErrInvalidArgument)
	}
	procs := runtime.GOMAXPROCS(0)
	c, err := newCodec(1, procs)
	if err != nil {
		return Throughput{}, err
	}
	defer c.close()

	var payload []byte
	var table []uint32
	compRate, err := timeLoop(ctx, len(sample), func() error {
		payload, table = c.compress(sample, elemBytes)
		return nil
	})
	if err != nil {
		return Throughput{}, err
	}
	out := make([]byte, len(sample))
	decRate, err := timeLoop(ctx, len(sample), func() error {
		return c.decompress(ctx, out, payload, table, defaultChunkRaw, elemBytes)
	})
	if err != nil {
		return Throughput{}, err
	}
	if string(out) != string(sample) {
		return Throughput{}, errors.New("coldstore: MeasureThroughput: round trip differs from the sample")
	}
	return Throughput{
		CompressBytesPerSec:   compRate,
		DecompressBytesPerSec: decRate,
		Ratio:                 float64(len(payload)) / float64(len(sample)),
	}, nil
}

// timeLoop runs f at least twice and for at least measureMinDuration and
// returns bytes per second for n bytes per call.
func timeLoop(ctx context.Context, n int, f func() error) (float64, error) {
	start := time.Now()
	reps := 0
	for reps < 2 || time.Since(start) < measureMinDuration {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := f(); err != nil {
			return 0, err
		}
		reps++
	}
	return float64(n) * float64(reps) / time.Since(start).Seconds(), nil
}

// checkElemBytes accepts the supported byte-plane strides.
func checkElemBytes(e int) error {
	switch e {
	case 1, 2, 4, 8:
		return nil
	}
	return fmt.Errorf("%w: element size %d (want 1, 2, 4 or 8)", ErrInvalidArgument, e)
}
