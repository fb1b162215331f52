package llama

/*
#include <stdlib.h>
#include <stdint.h>
#include "llama.h"

// A load is abandoned when its flag is set: llama.cpp stops at its next
// progress report when the callback returns false.
static bool ctxd_load_progress(float progress, void *data) {
	(void)progress;
	return __atomic_load_n((int32_t *)data, __ATOMIC_RELAXED) == 0;
}
static void ctxd_attach_load_abort(struct llama_model_params *p, int32_t *flag) {
	p->progress_callback = ctxd_load_progress;
	p->progress_callback_user_data = flag;
}
static void ctxd_set_load_abort(int32_t *flag) { __atomic_store_n(flag, 1, __ATOMIC_RELAXED); }
*/
import "C"

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
)

// Model is a GGUF model loaded by llama.cpp.
type Model struct {
	mu     sync.Mutex // guards closed and the context count
	m      *C.struct_llama_model
	vocab  *C.struct_llama_vocab
	facts  engine.Facts
	open   int // live contexts
	closed bool
	pieces []string // text of every token, cached

	ropeOnce sync.Once // RoPE parameters for RangeKeys, read on first use
	rope     rope
	ropeErr  error
}

var ggufMagic = []byte("GGUF")

// Load reads a GGUF file onto the CPU (and into host memory): LoadWith
// without a device.
func Load(path string) (*Model, error) {
	return LoadWith(path, engine.ModelOptions{})
}

// LoadWith is LoadContext without a deadline.
func LoadWith(path string, o engine.ModelOptions) (*Model, error) {
	return LoadContext(context.Background(), path, o)
}

// LoadContext reads a GGUF file, placing o.GPULayers transformer blocks on
// o.Device (a device of a backend registered by LoadBackends). The file is
// checked (readable, GGUF magic, a decoder-only attention model) before
// llama.cpp parses it; failures wrap engine.ErrBadModel or, for a missing
// file, os.ErrNotExist; an unknown device wraps engine.ErrInvalidArgument.
// When ctx ends, hashing the file stops and llama.cpp abandons the load at
// its next progress report; the error then wraps ctx.Err().
// Facts().Placement reports what llama.cpp actually allocated where.
func LoadContext(ctx context.Context, path string, o engine.ModelOptions) (*Model, error) {
	backendInit()
	digest, err := fileDigest(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	mp := C.llama_model_default_params()
	mp.use_mmap = true
	// devices is a NULL-terminated list: empty keeps every layer on the CPU
	// even when GPU backends are registered.
	devs := (*[2]C.ggml_backend_dev_t)(C.calloc(2, C.size_t(unsafe.Sizeof(C.ggml_backend_dev_t(nil)))))
	defer C.free(unsafe.Pointer(devs))
	var dev engine.Device
	if o.Device != "" {
		d, err := deviceByName(o.Device)
		if err != nil {
			return nil, err
		}
		devs[0] = d
		dev = device(d)
		mp.split_mode = C.LLAMA_SPLIT_MODE_NONE
		mp.main_gpu = 0
		mp.n_gpu_layers = C.int32_t(o.GPULayers)
		if o.GPULayers < 0 {
			mp.n_gpu_layers = 1 << 20
		}
	} else {
		mp.n_gpu_layers = 0
	}
	mp.devices = &devs[0]
	abort := (*C.int32_t)(C.calloc(1, 4))
	defer C.free(unsafe.Pointer(abort))
	C.ctxd_attach_load_abort(&mp, abort)
	aborted := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.ctxd_set_load_abort(abort)
		close(aborted)
	})
	var m *C.struct_llama_model
	bufs := captureBuffers(func() { m = C.llama_model_load_from_file(cpath, mp) })
	if !stop() {
		<-aborted // the flag is written before it is freed
		if m == nil {
			return nil, fmt.Errorf("loading %s: %w", path, ctx.Err())
		}
	}
	if m == nil {
		return nil, fmt.Errorf("%w: llama.cpp could not load %s (corrupt, truncated or unsupported; see the log)", engine.ErrBadModel, path)
	}
	if C.llama_model_has_encoder(m) || C.llama_model_is_recurrent(m) {
		C.llama_model_free(m)
		return nil, fmt.Errorf("%w: %s is not a decoder-only attention model", engine.ErrBadModel, path)
	}
	md := &Model{m: m, vocab: C.llama_model_get_vocab(m)}
	nHead := int(C.llama_model_n_head(m))
	nEmbd := int(C.llama_model_n_embd(m))
	headDim := 0
	if nHead > 0 {
		headDim = nEmbd / nHead
	}
	if v, ok := md.metaInt("%s.attention.key_length"); ok {
		headDim = v
	}
	var desc [256]C.char
	C.llama_model_desc(m, &desc[0], C.size_t(len(desc)))
	md.facts = engine.Facts{
		Embd:           nEmbd,
		Heads:          nHead,
		Path:           path,
		Digest:         digest,
		Description:    C.GoString(&desc[0]),
		Layers:         int(C.llama_model_n_layer(m)),
		KVHeads:        int(C.llama_model_n_head_kv(m)),
		HeadDim:        headDim,
		TrainedContext: int(C.llama_model_n_ctx_train(m)),
		VocabSize:      int(C.llama_vocab_n_tokens(md.vocab)),
		WeightsBytes:   int64(C.llama_model_size(m)),
		BOS:            engine.Token(C.llama_vocab_bos(md.vocab)),
		AddBOS:         bool(C.llama_vocab_get_add_bos(md.vocab)),
	}
	if md.facts.Layers <= 0 || md.facts.KVHeads <= 0 || md.facts.HeadDim <= 0 || md.facts.VocabSize <= 0 {
		C.llama_model_free(m)
		return nil, fmt.Errorf("%w: %s reports layers=%d kv_heads=%d head_dim=%d vocab=%d",
			engine.ErrBadModel, path, md.facts.Layers, md.facts.KVHeads, md.facts.HeadDim, md.facts.VocabSize)
	}
	if t := C.llama_model_chat_template(m, nil); t != nil {
		md.facts.ChatTemplate = C.GoString(t)
	}
	md.facts.Architecture, _ = md.metaStr("general.architecture")
	md.facts.BOSText = md.tokenText(C.llama_vocab_bos(md.vocab))
	md.facts.EOSText = md.tokenText(C.llama_vocab_eos(md.vocab))
	md.pieces = make([]string, md.facts.VocabSize)
	buf := make([]byte, 256)
	for t := range md.pieces {
		n := C.llama_token_to_piece(md.vocab, C.llama_token(t), (*C.char)(unsafe.Pointer(&buf[0])), C.int32_t(len(buf)), 0, false)
		if n > 0 {
			md.pieces[t] = string(buf[:n])
		}
	}
	md.facts.CanShift = md.probeShift()
	md.facts.Placement = placement(dev, int(mp.n_gpu_layers), md.facts.Layers, bufs)
	return md, nil
}

// tokenText is a token's text in the vocabulary ("" for none).
func (md *Model) tokenText(t C.llama_token) string {
	if t < 0 || int(t) >= md.facts.VocabSize {
		return ""
	}
	return C.GoString(C.llama_vocab_get_text(md.vocab, t))
}

// metaInt reads an integer GGUF key; %s is replaced by the architecture.
func (md *Model) metaInt(keyFmt string) (int, bool) {
	arch, ok := md.metaStr("general.architecture")
	if !ok {
		return 0, false
	}
	v, ok := md.metaStr(fmt.Sprintf(keyFmt, arch))
	if !ok {
		return 0, false
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil {
		return 0, false
	}
	return n, true
}

func (md *Model) metaStr(key string) (string, bool) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var buf [512]C.char
	n := C.llama_model_meta_val_str(md.m, ck, &buf[0], C.size_t(len(buf)))
	if n < 0 {
		return "", false
	}
	return C.GoString(&buf[0]), true
}

// probeShift asks llama.cpp whether the model's memory can shift positions,
// using a minimal throwaway context.
func (md *Model) probeShift() bool {
	cp := C.llama_context_default_params()
	cp.n_ctx = 16
	cp.n_batch = 16
	cp.n_ubatch = 16
	cp.n_seq_max = 1
	ctx := C.llama_init_from_model(md.m, cp)
	if ctx == nil {
		return false
	}
	defer C.llama_free(ctx)
	return bool(C.llama_memory_can_shift(C.llama_get_memory(ctx)))
}

// openModelFile opens a model file for reading and checks that it is a
// regular file starting with GGUF's magic, which it has then read. A
// missing file wraps os.ErrNotExist, anything else engine.ErrBadModel.
func openModelFile(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("model file %s: %w", path, err)
		}
		return nil, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: %w", engine.ErrBadModel, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", engine.ErrBadModel, path)
	}
	magic := make([]byte, len(ggufMagic))
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, ggufMagic) {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a GGUF file (bad magic)", engine.ErrBadModel, path)
	}
	return f, nil
}

// checkModelFile is openModelFile's check alone.
func checkModelFile(path string) error {
	f, err := openModelFile(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func fileDigest(ctx context.Context, path string) (string, error) {
	f, err := openModelFile(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	h.Write(ggufMagic)
	if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", fmt.Errorf("hashing %s: %w", path, cerr)
		}
		return "", fmt.Errorf("%w: reading %s: %v", engine.ErrBadModel, path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader reads r until ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// Facts describes the model.
func (md *Model) Facts() engine.Facts { return md.facts }

// Tokenize turns text into tokens. Special-token syntax in text is not
// parsed: user text can never forge control tokens.
func (md *Model) Tokenize(text string, addBOS bool) ([]engine.Token, error) {
	return md.tokenize(text, addBOS, false)
}

// TokenizeSpecial turns text into tokens with the texts of the model's
// control tokens parsed (llama_tokenize parse_special), for a chat
// template's control markers only.
func (md *Model) TokenizeSpecial(text string) ([]engine.Token, error) {
	return md.tokenize(text, false, true)
}

func (md *Model) tokenize(text string, addBOS, special bool) ([]engine.Token, error) {
	if err := md.alive(); err != nil {
		return nil, err
	}
	if len(text) > 1<<30 {
		return nil, fmt.Errorf("%w: text of %d bytes is too long to tokenize", engine.ErrInvalidArgument, len(text))
	}
	n := len(text) + 2
	out := make([]engine.Token, n)
	var cText *C.char
	if len(text) > 0 {
		cText = (*C.char)(unsafe.Pointer(unsafe.StringData(text)))
	}
	bos := C.bool(addBOS && md.facts.AddBOS)
	r := C.llama_tokenize(md.vocab, cText, C.int32_t(len(text)), (*C.llama_token)(unsafe.Pointer(&out[0])), C.int32_t(n), bos, C.bool(special))
	if r < 0 {
		if r == C.INT32_MIN {
			return nil, fmt.Errorf("%w: tokenization overflow", engine.ErrInvalidArgument)
		}
		out = make([]engine.Token, -r)
		r = C.llama_tokenize(md.vocab, cText, C.int32_t(len(text)), (*C.llama_token)(unsafe.Pointer(&out[0])), -r, bos, C.bool(special))
		if r < 0 {
			return nil, fmt.Errorf("%w: tokenization failed", engine.ErrInvalidArgument)
		}
	}
	return out[:r], nil
}

// Piece is the text of token t ("" for ids outside the vocabulary).
func (md *Model) Piece(t engine.Token) string {
	if t < 0 || int(t) >= len(md.pieces) {
		return ""
	}
	return md.pieces[t]
}

// IsEOG reports whether t ends generation.
func (md *Model) IsEOG(t engine.Token) bool {
	if t < 0 || int(t) >= md.facts.VocabSize {
		return false
	}
	return bool(C.llama_vocab_is_eog(md.vocab, C.llama_token(t)))
}

func (md *Model) alive() error {
	md.mu.Lock()
	defer md.mu.Unlock()
	if md.closed {
		return engine.ErrClosed
	}
	return nil
}

// Close frees the model. It fails while contexts made from it are open.
func (md *Model) Close() error {
	md.mu.Lock()
	defer md.mu.Unlock()
	if md.closed {
		return nil
	}
	if md.open > 0 {
		return fmt.Errorf("%w: %d contexts still open on the model", engine.ErrInvalidArgument, md.open)
	}
	md.closed = true
	C.llama_model_free(md.m)
	md.m = nil
	return nil
}

var _ engine.Model = (*Model)(nil)

// placement reads where llama.cpp put the weights from the buffers it
// reported: bytes in the device's own buffer are on the device.
func placement(dev engine.Device, gpuLayers, layers int, b buffers) engine.Placement {
	p := engine.Placement{HostWeightsBytes: b.total("model")}
	if dev.Name == "" {
		return p
	}
	p.DeviceWeightsBytes = b.on("model", dev.Name)
	p.HostWeightsBytes -= p.DeviceWeightsBytes
	if p.DeviceWeightsBytes == 0 {
		return p // the device took nothing: the layers run on the CPU
	}
	p.Device = dev
	p.GPULayers = min(gpuLayers, layers)
	p.OutputOnGPU = gpuLayers > layers
	return p
}
