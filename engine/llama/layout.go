package llama

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/gguf"
)

// ReadLayout reads a model file's header (no tensor data) for the sizes an
// offload is planned from: weight bytes per transformer block
// ("blk.N.*"), of the output head ("output*"; the token embeddings when the
// head is tied to them, as llama.cpp then duplicates them onto the device)
// and of the token embeddings, which stay in host memory. Failures wrap
// engine.ErrBadModel.
func ReadLayout(path string) (engine.Layout, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return engine.Layout{}, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	arch, _ := f.String("general.architecture")
	u := func(key string) int {
		v, _ := f.Uint(arch + "." + key)
		return int(v)
	}
	l := engine.Layout{
		Layers:         u("block_count"),
		Embd:           u("embedding_length"),
		Heads:          u("attention.head_count"),
		KVHeads:        u("attention.head_count_kv"),
		HeadDim:        u("attention.key_length"),
		TrainedContext: u("context_length"),
	}
	if l.KVHeads == 0 {
		l.KVHeads = l.Heads
	}
	if l.HeadDim == 0 && l.Heads > 0 {
		l.HeadDim = l.Embd / l.Heads
	}
	if v, ok := f.Get("tokenizer.ggml.tokens"); ok {
		if a, ok := v.(gguf.Array); ok {
			l.VocabSize = len(a.Items)
		}
	}
	if l.Layers <= 0 {
		return engine.Layout{}, fmt.Errorf("%w: %s has no %s.block_count", engine.ErrBadModel, path, arch)
	}
	l.LayerBytes = make([]int64, l.Layers)
	tied, embdBytes := true, int64(0)
	for _, t := range f.Tensors {
		size, err := t.Size()
		if err != nil {
			return engine.Layout{}, fmt.Errorf("%w: %s: %v", engine.ErrBadModel, path, err)
		}
		n := int64(size)
		switch {
		case strings.HasPrefix(t.Name, "blk."):
			rest := strings.TrimPrefix(t.Name, "blk.")
			i, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '.'), 0)])
			if err != nil || i < 0 || i >= l.Layers {
				return engine.Layout{}, fmt.Errorf("%w: %s: tensor %q outside the %d blocks", engine.ErrBadModel, path, t.Name, l.Layers)
			}
			l.LayerBytes[i] += n
		case t.Name == "token_embd.weight":
			l.InputBytes += n
			embdBytes = n
		case strings.HasPrefix(t.Name, "output"):
			if t.Name == "output.weight" {
				tied = false
			}
			l.OutputBytes += n
		default:
			l.InputBytes += n // rope factors and the like stay beside the input
		}
	}
	if tied {
		l.OutputBytes += embdBytes
	}
	return l, nil
}
