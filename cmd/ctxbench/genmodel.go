package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/gguf"
	"github.com/ctxd/ctxd/policy"
)

// errModelShape reports gen-model flags that do not describe a model.
var errModelShape = errors.New("invalid model shape")

// modelShape is what gen-model builds: a llama-architecture model with
// random weights and a source model's tokenizer.
type modelShape struct {
	Layers, Embd, Heads, KVHeads, FFN, Ctx int
	Type                                   gguf.TensorType // of 2-D weights: f16 or f32
	Seed                                   uint64
}

func (s modelShape) HeadDim() int { return s.Embd / s.Heads }

// validate checks the shape; errors wrap errModelShape.
func (s modelShape) validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"--layers", s.Layers}, {"--embd", s.Embd}, {"--heads", s.Heads}, {"--kv-heads", s.KVHeads}, {"--ffn", s.FFN}, {"--ctx", s.Ctx}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", errModelShape, f.name, f.v)
		}
	}
	if s.Embd%s.Heads != 0 {
		return fmt.Errorf("%w: --embd %d is not a multiple of --heads %d (head dimension = embd / heads)", errModelShape, s.Embd, s.Heads)
	}
	if s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("%w: --heads %d is not a multiple of --kv-heads %d (each KV head serves a whole group of query heads)", errModelShape, s.Heads, s.KVHeads)
	}
	if s.HeadDim()%2 != 0 {
		return fmt.Errorf("%w: head dimension %d (embd %d / heads %d) is odd; RoPE rotates pairs", errModelShape, s.HeadDim(), s.Embd, s.Heads)
	}
	if s.Type != gguf.TensorF16 && s.Type != gguf.TensorF32 {
		return fmt.Errorf("%w: weight type %s (f16 or f32)", errModelShape, s.Type)
	}
	return nil
}

// tensors lists the tensors llama.cpp's llama architecture loads, in the
// order it names them; dims are ggml's (input dimension first).
func (s modelShape) tensors(vocab int) []gguf.TensorInfo {
	e, q, kv, ff := uint64(s.Embd), uint64(s.Heads*s.HeadDim()), uint64(s.KVHeads*s.HeadDim()), uint64(s.FFN)
	w := func(name string, dims ...uint64) gguf.TensorInfo {
		return gguf.TensorInfo{Name: name, Dims: dims, Type: s.Type}
	}
	norm := func(name string) gguf.TensorInfo {
		return gguf.TensorInfo{Name: name, Dims: []uint64{e}, Type: gguf.TensorF32}
	}
	ts := []gguf.TensorInfo{w("token_embd.weight", e, uint64(vocab)), norm("output_norm.weight"), w("output.weight", e, uint64(vocab))}
	for i := 0; i < s.Layers; i++ {
		b := fmt.Sprintf("blk.%d.", i)
		ts = append(ts,
			norm(b+"attn_norm.weight"),
			w(b+"attn_q.weight", e, q),
			w(b+"attn_k.weight", e, kv),
			w(b+"attn_v.weight", e, kv),
			w(b+"attn_output.weight", q, e),
			norm(b+"ffn_norm.weight"),
			w(b+"ffn_gate.weight", e, ff),
			w(b+"ffn_up.weight", e, ff),
			w(b+"ffn_down.weight", ff, e),
		)
	}
	return ts
}

// metadata is the model's GGUF metadata: the shape as llama.cpp's llama
// architecture reads it, then every tokenizer.ggml.* key of src. It
// returns the vocabulary size (the number of tokenizer tokens).
func (s modelShape) metadata(src *gguf.File, name string) ([]gguf.KV, int, error) {
	toks, ok := src.Get("tokenizer.ggml.tokens")
	arr, isArr := toks.(gguf.Array)
	if !ok || !isArr || len(arr.Items) == 0 {
		return nil, 0, fmt.Errorf("source model has no tokenizer.ggml.tokens array to copy")
	}
	vocab := len(arr.Items)
	fileType := uint32(1) // LLAMA_FTYPE_MOSTLY_F16
	if s.Type == gguf.TensorF32 {
		fileType = 0 // LLAMA_FTYPE_ALL_F32
	}
	u := func(v int) uint32 { return uint32(v) }
	kvs := []gguf.KV{
		{Key: "general.architecture", Value: "llama"},
		{Key: "general.name", Value: name},
		{Key: "general.file_type", Value: fileType},
		{Key: "llama.vocab_size", Value: u(vocab)},
		{Key: "llama.context_length", Value: u(s.Ctx)},
		{Key: "llama.embedding_length", Value: u(s.Embd)},
		{Key: "llama.block_count", Value: u(s.Layers)},
		{Key: "llama.feed_forward_length", Value: u(s.FFN)},
		{Key: "llama.attention.head_count", Value: u(s.Heads)},
		{Key: "llama.attention.head_count_kv", Value: u(s.KVHeads)},
		{Key: "llama.rope.dimension_count", Value: u(s.HeadDim())},
		{Key: "llama.attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: "llama.rope.freq_base", Value: float32(10000)},
	}
	for _, kv := range src.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.ggml.") {
			kvs = append(kvs, kv)
		}
	}
	return kvs, vocab, nil
}

func cmdGenModel(ctx context.Context, e *cli.Env, args []string) error {
	flags := flag.NewFlagSet("gen-model", flag.ContinueOnError)
	var s modelShape
	flags.IntVar(&s.Layers, "layers", 24, "transformer blocks")
	flags.IntVar(&s.Embd, "embd", 896, "embedding width")
	flags.IntVar(&s.Heads, "heads", 14, "attention (query) heads")
	flags.IntVar(&s.KVHeads, "kv-heads", 2, "key/value heads (grouped-query attention)")
	flags.IntVar(&s.FFN, "ffn", 4864, "feed-forward width")
	flags.IntVar(&s.Ctx, "ctx", 4096, "trained context written to llama.context_length")
	flags.Uint64Var(&s.Seed, "seed", 1, "seed of the random weights")
	out := flags.String("out", "", "GGUF file to write")
	from := flags.String("from", defaultModel(), "model whose tokenizer is copied")
	typ := flags.String("type", "f16", "type of the 2-D weights: f16, f32, or quantized by the engine: q8_0, q4_k_m, q4_0 (norms are f32)")
	force := flags.Bool("force", false, "overwrite --out if it exists")
	if err := cli.Parse(flags, e.Stderr, args); err != nil {
		return err
	}
	var quant engine.WeightType
	switch *typ {
	case "f16":
		s.Type = gguf.TensorF16
	case "f32":
		s.Type = gguf.TensorF32
	default:
		q, err := engine.ParseWeightType(*typ)
		if err != nil {
			return cli.Usage(fmt.Errorf("--type %q: f16, f32, %s, %s or %s", *typ, engine.WeightQ8_0, engine.WeightQ4_KM, engine.WeightQ4_0))
		}
		quant, s.Type = q, gguf.TensorF16
	}
	if *out == "" {
		return cli.Usage(fmt.Errorf("--out is required"))
	}
	if err := s.validate(); err != nil {
		return cli.Usage(err)
	}
	src, err := gguf.Open(*from)
	if err != nil {
		return fmt.Errorf("tokenizer source: %w", err)
	}
	t0 := time.Now()
	var bar *cli.Progress
	started := false
	progress := func(done, total int64) {
		if !started {
			bar, started = e.NewProgress("writing "+filepath.Base(*out), total, "B"), true
		}
		bar.Set(done)
	}
	var res genResult
	if quant == "" {
		res, err = writeModel(ctx, s, src, *out, *force, progress)
		bar.Done()
	} else {
		res, err = quantizeModel(ctx, llama.Backend{}, s, quant, src, *out, *force, progress, func() {
			bar.Done()
			bar = nil
			fmt.Fprintf(e.Stderr, "quantizing to %s with the engine…\n", quant)
		})
		bar.Done()
	}
	if err != nil {
		return err
	}
	kv := policy.KVBytesPerToken(s.Layers, s.KVHeads, s.HeadDim(), policy.KVTypeF16)
	weights := s.Type.String()
	if quant != "" {
		weights = string(quant)
	}
	fmt.Fprintf(e.Stdout, "wrote %s: %.1f MiB, %s weights, %.1fM parameters (%d layers, embd %d, %d heads × %d, %d KV heads, ffn %d, vocab %d from %s), KV %d bytes/token at f16, in %.1fs\n",
		*out, float64(res.bytes)/(1<<20), weights, float64(res.params)/1e6, s.Layers, s.Embd, s.Heads, s.HeadDim(), s.KVHeads, s.FFN, res.vocab, *from, kv, time.Since(t0).Seconds())
	return nil
}

// genResult is what writeModel wrote.
type genResult struct {
	bytes, params int64
	vocab         int
}

// writeModel writes the model to a temporary file beside out and moves it
// into place only when complete: without force, an existing out is never
// replaced (checked before writing and again, atomically, at the end).
// onWrite, when set, sees the bytes written so far and the file's size
// after each tensor.
func writeModel(ctx context.Context, s modelShape, src *gguf.File, out string, force bool, onWrite func(done, total int64)) (genResult, error) {
	if err := s.validate(); err != nil {
		return genResult{}, err
	}
	if !force {
		if _, err := os.Lstat(out); err == nil {
			return genResult{}, fmt.Errorf("%s: %w (use --force to overwrite)", out, fs.ErrExist)
		}
	}
	name := fmt.Sprintf("ctxd synthetic llama %dL-%de-%dh-%dkv-%dff seed %d", s.Layers, s.Embd, s.Heads, s.KVHeads, s.FFN, s.Seed)
	kvs, vocab, err := s.metadata(src, name)
	if err != nil {
		return genResult{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return genResult{}, err
	}
	moved := false
	defer func() {
		if !moved {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	w, err := gguf.NewWriter(tmp, kvs, s.tensors(vocab))
	if err != nil {
		return genResult{}, err
	}
	if onWrite == nil {
		onWrite = func(done, total int64) {}
	}
	res := genResult{vocab: vocab}
	for i := 0; ; i++ {
		t, ok := w.Next()
		if !ok {
			break
		}
		res.params += int64(t.Elements())
		r := newRandomTensor(ctx, t, s.Seed, uint64(i))
		if err := w.WriteTensor(r); err != nil {
			return genResult{}, fmt.Errorf("writing %s: %w", out, err)
		}
		onWrite(int64(w.HeaderSize()+t.Offset+uint64(t.Elements())*r.size), int64(w.Size()))
	}
	if err := w.Close(); err != nil {
		return genResult{}, fmt.Errorf("writing %s: %w", out, err)
	}
	res.bytes = int64(w.Size())
	if err := tmp.Chmod(0o644); err != nil {
		return genResult{}, err
	}
	if err := tmp.Sync(); err != nil {
		return genResult{}, err
	}
	if err := tmp.Close(); err != nil {
		return genResult{}, err
	}
	if err := publish(tmp.Name(), out, force); err != nil {
		return genResult{}, err
	}
	moved = true
	return res, nil
}

// publish moves the complete file tmp to out: without force an existing
// out is never replaced (atomically, where the file system has hard
// links). tmp is gone afterwards unless an error is returned.
func publish(tmp, out string, force bool) error {
	var err error
	if force {
		err = os.Rename(tmp, out)
	} else if err = os.Link(tmp, out); err == nil {
		os.Remove(tmp)
	} else if errors.Is(err, fs.ErrExist) {
		err = fmt.Errorf("%s: %w (appeared while writing; use --force to overwrite)", out, fs.ErrExist)
	} else if _, serr := os.Lstat(out); serr != nil {
		// No hard links on this file system: check, then rename (a file
		// appearing between the two would be replaced).
		err = os.Rename(tmp, out)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(out)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// quantizeModel writes the f16 model described by s to a temporary file
// beside out, then has the engine quantize it to out in type to (the
// engine's own quantizer, as users' Q8_0 and Q4_K_M files are made). The
// f16 file is removed in any case; without force an existing out is never
// replaced. onWrite sees the f16 file's progress; onQuantize, when set, is
// called when quantizing starts.
func quantizeModel(ctx context.Context, q engine.Quantizer, s modelShape, to engine.WeightType, src *gguf.File, out string, force bool, onWrite func(done, total int64), onQuantize func()) (genResult, error) {
	if !force {
		if _, err := os.Lstat(out); err == nil {
			return genResult{}, fmt.Errorf("%s: %w (use --force to overwrite)", out, fs.ErrExist)
		}
	}
	s.Type = gguf.TensorF16
	f16 := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".f16-"+strconv.Itoa(os.Getpid()))
	defer os.Remove(f16)
	res, err := writeModel(ctx, s, src, f16, true, onWrite)
	if err != nil {
		return genResult{}, err
	}
	if onQuantize != nil {
		onQuantize()
	}
	qtmp := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+"."+string(to)+"-"+strconv.Itoa(os.Getpid()))
	defer os.Remove(qtmp)
	if err := q.Quantize(ctx, f16, qtmp, to, 0); err != nil {
		return genResult{}, err
	}
	st, err := os.Stat(qtmp)
	if err != nil {
		return genResult{}, err
	}
	res.bytes = st.Size()
	if err := publish(qtmp, out, force); err != nil {
		return genResult{}, err
	}
	return res, nil
}

// randomTensor yields one tensor's data: norm weights are 1, other
// weights normal(0, 0.02), drawn from a PCG stream seeded by (seed,
// tensor index) so a file is reproducible. Data is produced in chunks, so
// memory stays small whatever the tensor's size.
type randomTensor struct {
	ctx   context.Context
	rng   *rand.Rand
	typ   gguf.TensorType
	size  uint64 // bytes per element
	ones  bool
	left  uint64 // elements not yet produced
	store []byte
	buf   []byte // produced, not yet read
}

const (
	initStd      = 0.02
	chunkElems   = 1 << 15
	normOneValue = 1.0
)

func newRandomTensor(ctx context.Context, t gguf.TensorInfo, seed, index uint64) *randomTensor {
	size := uint64(4)
	if t.Type == gguf.TensorF16 {
		size = 2
	}
	return &randomTensor{
		ctx: ctx, rng: rand.New(rand.NewPCG(seed, index)), typ: t.Type, size: size,
		ones: strings.HasSuffix(t.Name, "_norm.weight"), left: t.Elements(),
		store: make([]byte, chunkElems*size),
	}
}

func (r *randomTensor) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.left == 0 {
			return 0, io.EOF
		}
		if err := r.ctx.Err(); err != nil {
			return 0, err
		}
		n := min(r.left, chunkElems)
		for i := uint64(0); i < n; i++ {
			v := float32(normOneValue)
			if !r.ones {
				v = float32(r.rng.NormFloat64() * initStd)
			}
			if r.typ == gguf.TensorF16 {
				binary.LittleEndian.PutUint16(r.store[i*2:], gguf.F16(v))
			} else {
				binary.LittleEndian.PutUint32(r.store[i*4:], math.Float32bits(v))
			}
		}
		r.left -= n
		r.buf = r.store[:n*r.size]
	}
	k := copy(p, r.buf)
	r.buf = r.buf[k:]
	return k, nil
}
