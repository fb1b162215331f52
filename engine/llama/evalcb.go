package llama

/*
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include "ggml.h"
#include "ggml-backend.h"
#include "llama.h"

// ctxd_capture is the state of llama.cpp's graph callback (cb_eval) for
// one context. The callback is attached when the context is created and
// answers "no" at once while armed is 0, so a plain decode pays one
// indirect call per graph node. Armed, it copies the rows of the tensors
// named "<prefix>-<layer>" or "<prefix>_normed-<layer>" that are not RoPE
// results (the projection, its bias sum, its per-head norm) and checks,
// when the RoPE node named "<prefix>-<layer>" is reached, that its input
// is the tensor copied last: what was captured is exactly what RoPE
// rotates. Tensors of those names after that RoPE are ignored. It runs on
// the thread that called llama_decode.
struct ctxd_capture {
	int32_t armed;
	char prefix[16];
	int32_t prefix_len;
	int32_t n_layer;
	int32_t *slot;                    // [n_layer]: output index, -1 = not wanted
	const struct ggml_tensor **cand;  // [n_layer]: last tensor copied in this ubatch
	int32_t *verified;                // [n_layer]: its RoPE node read it
	int32_t n_slots;
	int64_t row_floats;               // heads × head dim
	int32_t ub_tokens;                // tokens in the ubatch being computed
	int32_t t0, t1;                   // tokens of the ubatch to copy
	int32_t row0;                     // output row of token t0
	float *out;                       // [rows][n_slots][row_floats] (pinned Go memory)
	float *scratch;                   // [ub_tokens][row_floats]
	int32_t err;                      // first problem (CTXD_CAP_ERR_*)
	int32_t err_layer;
	int64_t err_ne[4];
	int64_t copies;                   // tensors copied while armed
};

enum {
	CTXD_CAP_ERR_TYPE = 1,   // captured tensor is not f32
	CTXD_CAP_ERR_SHAPE = 2,  // captured tensor has an unexpected shape
	CTXD_CAP_ERR_SOURCE = 3, // RoPE's input is not the tensor captured
};

static struct ctxd_capture *ctxd_capture_new(int32_t n_layer) {
	struct ctxd_capture *c = calloc(1, sizeof(*c));
	if (!c) return NULL;
	c->n_layer = n_layer;
	c->slot = malloc(sizeof(int32_t) * n_layer);
	c->cand = calloc(n_layer, sizeof(*c->cand));
	c->verified = calloc(n_layer, sizeof(int32_t));
	if (!c->slot || !c->cand || !c->verified) {
		free(c->slot); free(c->cand); free(c->verified); free(c);
		return NULL;
	}
	for (int i = 0; i < n_layer; i++) c->slot[i] = -1;
	return c;
}

static void ctxd_capture_free(struct ctxd_capture *c) {
	if (!c) return;
	free(c->slot); free(c->cand); free(c->verified); free(c);
}

static void ctxd_capture_set_prefix(struct ctxd_capture *c, const char *p) {
	strncpy(c->prefix, p, sizeof(c->prefix) - 1);
	c->prefix[sizeof(c->prefix) - 1] = 0;
	c->prefix_len = (int32_t)strlen(c->prefix);
}

// ctxd_capture_begin_ubatch readies the capture for one llama_decode call.
static void ctxd_capture_begin_ubatch(struct ctxd_capture *c, int32_t ub_tokens, int32_t t0, int32_t t1, int32_t row0) {
	c->ub_tokens = ub_tokens;
	c->t0 = t0;
	c->t1 = t1;
	c->row0 = row0;
	for (int i = 0; i < c->n_layer; i++) {
		c->cand[i] = NULL;
		c->verified[i] = 0;
	}
	c->armed = t0 < t1;
}

// ctxd_capture_layer parses "<prefix>-<il>" or "<prefix>_normed-<il>"
// (Qwen3, Gemma: the per-head norm RoPE then rotates) and returns il when
// the layer is wanted, else -1.
static int ctxd_capture_layer(const struct ctxd_capture *c, const char *name) {
	if (strncmp(name, c->prefix, c->prefix_len) != 0) return -1;
	const char *p = name + c->prefix_len;
	if (strncmp(p, "_normed", 7) == 0) p += 7;
	if (*p != '-') return -1;
	p++;
	if (*p < '0' || *p > '9') return -1;
	int il = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || il > 1 << 20) return -1;
		il = il * 10 + (*p - '0');
	}
	if (il >= c->n_layer || c->slot[il] < 0) return -1;
	return il;
}

static void ctxd_capture_fail(struct ctxd_capture *c, int32_t code, int il, const struct ggml_tensor *t) {
	if (c->err) return;
	c->err = code;
	c->err_layer = il;
	for (int i = 0; i < 4; i++) c->err_ne[i] = t->ne[i];
}

static void ctxd_capture_copy(struct ctxd_capture *c, struct ggml_tensor *t, int il) {
	if (t->type != GGML_TYPE_F32) {
		ctxd_capture_fail(c, CTXD_CAP_ERR_TYPE, il, t);
		return;
	}
	const int64_t hd = c->row_floats;
	int64_t dim, heads, n_tok;
	size_t nb_head, nb_tok;
	if (t->ne[0] == hd && t->ne[2] == 1 && t->ne[3] == 1) {
		dim = hd; heads = 1; nb_head = 0; n_tok = t->ne[1]; nb_tok = t->nb[1];
	} else if (t->ne[0] * t->ne[1] == hd && t->ne[3] == 1) {
		dim = t->ne[0]; heads = t->ne[1]; nb_head = t->nb[1]; n_tok = t->ne[2]; nb_tok = t->nb[2];
	} else {
		ctxd_capture_fail(c, CTXD_CAP_ERR_SHAPE, il, t);
		return;
	}
	if (n_tok != c->ub_tokens || t->nb[0] != sizeof(float)) {
		ctxd_capture_fail(c, CTXD_CAP_ERR_SHAPE, il, t);
		return;
	}
	const int slot = c->slot[il];
	const int n = c->t1 - c->t0;
	const size_t row_bytes = hd * sizeof(float);
	const int row_contig = heads == 1 || nb_head == dim * sizeof(float);
	if (row_contig && nb_tok == row_bytes) {
		// One copy of the wanted rows (one transfer from a device), then
		// spread them out.
		ggml_backend_tensor_get(t, c->scratch, (size_t)c->t0 * nb_tok, (size_t)n * row_bytes);
		for (int i = 0; i < n; i++) {
			memcpy(c->out + ((int64_t)(c->row0 + i) * c->n_slots + slot) * hd, c->scratch + (int64_t)i * hd, row_bytes);
		}
	} else if (row_contig) {
		for (int i = 0; i < n; i++) {
			ggml_backend_tensor_get(t, c->out + ((int64_t)(c->row0 + i) * c->n_slots + slot) * hd, (size_t)(c->t0 + i) * nb_tok, row_bytes);
		}
	} else {
		for (int i = 0; i < n; i++) {
			float *dst = c->out + ((int64_t)(c->row0 + i) * c->n_slots + slot) * hd;
			for (int64_t h = 0; h < heads; h++) {
				ggml_backend_tensor_get(t, dst + h * dim, (size_t)(c->t0 + i) * nb_tok + h * nb_head, dim * sizeof(float));
			}
		}
	}
	c->cand[il] = t;
	c->copies++;
}

static bool ctxd_eval_cb(struct ggml_tensor *t, bool ask, void *data) {
	struct ctxd_capture *c = data;
	if (!c->armed) return false;
	int il = ctxd_capture_layer(c, t->name);
	if (il < 0 || c->verified[il]) return false; // after RoPE: not ours (Llama 4 norms then)
	if (t->op == GGML_OP_ROPE) {
		if (ask) {
			const struct ggml_tensor *src = t->src[0];
			const struct ggml_tensor *got = c->cand[il];
			if (!got || !src || src->data != got->data || ggml_nbytes(src) != ggml_nbytes(got)) {
				ctxd_capture_fail(c, CTXD_CAP_ERR_SOURCE, il, t);
			} else {
				c->verified[il] = 1;
			}
		}
		return false;
	}
	if (ask) return true;
	ctxd_capture_copy(c, t, il);
	return true;
}

static void ctxd_attach_eval(struct llama_context_params *p, struct ctxd_capture *c) {
	p->cb_eval = ctxd_eval_cb;
	p->cb_eval_user_data = c;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
)

// evalState is a context's graph-callback state (C memory: llama.cpp
// holds a pointer to it for the context's life).
type evalState = C.struct_ctxd_capture

// newEvalState allocates the callback state of a model with n layers.
func newEvalState(n int) *evalState { return C.ctxd_capture_new(C.int32_t(n)) }

// attachEval makes p's contexts call the capture callback with s.
func attachEval(p *C.struct_llama_context_params, s *evalState) { C.ctxd_attach_eval(p, s) }

// freeEvalState frees s (after the context using it is freed).
func freeEvalState(s *evalState) { C.ctxd_capture_free(s) }

// captureSpec names what a capturing decode copies out: the rows of the
// pre-RoPE tensors "<Prefix>-<layer>" (Qcur: queries, Kcur: keys) of the
// last Last tokens, for Layers (model layer ids, distinct), each row
// Heads × HeadDim floats.
type captureSpec struct {
	Prefix string
	Layers []int
	Heads  int
	Last   int
}

// capture is one capturing decode in progress. The callback writes the
// rows straight into out, a Go slice pinned for the call.
type capture struct {
	c     *C.struct_ctxd_capture
	spec  captureSpec
	out   []float32
	pin   runtime.Pinner
	total int // last tokens of the call: rows of the output
	nTok  int // tokens of the call
}

// startCapture arms c's callback for a decode of n tokens with ubatches
// of at most ub tokens. finish or abandon must follow.
func (c *Context) startCapture(s captureSpec, n, ub int) (*capture, error) {
	cc := c.evalcb
	if cc == nil {
		return nil, fmt.Errorf("%w: context made without the graph callback", engine.ErrInvalidArgument)
	}
	rowF := s.Heads * c.model.facts.HeadDim
	k := &capture{c: cc, spec: s, total: s.Last, nTok: n, out: make([]float32, s.Last*len(s.Layers)*rowF)}
	cc.scratch = (*C.float)(C.malloc(C.size_t(ub * rowF * 4)))
	if cc.scratch == nil {
		return nil, fmt.Errorf("%w: no memory for a capture of %d rows of %d values", engine.ErrContextFull, ub, rowF)
	}
	k.pin.Pin(&k.out[0])
	cc.out = (*C.float)(unsafe.Pointer(&k.out[0]))
	p := C.CString(s.Prefix)
	C.ctxd_capture_set_prefix(cc, p)
	C.free(unsafe.Pointer(p))
	slots := unsafe.Slice((*C.int32_t)(cc.slot), int(cc.n_layer))
	for i := range slots {
		slots[i] = -1
	}
	for i, l := range s.Layers {
		slots[l] = C.int32_t(i)
	}
	cc.n_slots = C.int32_t(len(s.Layers))
	cc.row_floats = C.int64_t(rowF)
	cc.err = 0
	cc.copies = 0
	return k, nil
}

// beginBatch arms the capture for the ubatch of tokens [off,end) of the
// call (disarmed when none of them is wanted).
func (k *capture) beginBatch(off, end int) {
	first := k.nTok - k.total // first wanted token of the call
	t0 := max(off, first)
	if t0 >= end {
		C.ctxd_capture_begin_ubatch(k.c, C.int32_t(end-off), 0, 0, 0)
		return
	}
	C.ctxd_capture_begin_ubatch(k.c, C.int32_t(end-off), C.int32_t(t0-off), C.int32_t(end-off), C.int32_t(t0-first))
}

// endBatch disarms the callback and reports what went wrong in the
// ubatch: a tensor of an unexpected type or shape, or a wanted layer
// whose pre-RoPE tensor was not identified.
func (k *capture) endBatch() error {
	armed := k.c.armed != 0
	k.c.armed = 0
	if e := k.c.err; e != 0 {
		ne := k.c.err_ne
		what := map[C.int32_t]string{
			C.CTXD_CAP_ERR_TYPE:   "is not f32",
			C.CTXD_CAP_ERR_SHAPE:  "has an unexpected shape",
			C.CTXD_CAP_ERR_SOURCE: "is not what RoPE reads (the model's graph differs from llama's)",
		}[e]
		return fmt.Errorf("%w: tensor %s-%d [%d %d %d %d] %s", engine.ErrInvalidArgument,
			k.spec.Prefix, int(k.c.err_layer), int64(ne[0]), int64(ne[1]), int64(ne[2]), int64(ne[3]), what)
	}
	if !armed {
		return nil
	}
	verified := unsafe.Slice((*C.int32_t)(k.c.verified), int(k.c.n_layer))
	for _, l := range k.spec.Layers {
		if verified[l] == 0 {
			return fmt.Errorf("%w: the model's graph has no pre-RoPE tensor %s-%d feeding a RoPE node", engine.ErrInvalidArgument, k.spec.Prefix, l)
		}
	}
	return nil
}

// finish returns the captured rows (in HeadVectors order: row, layer,
// head, dim) and releases the capture.
func (k *capture) finish() []float32 {
	k.abandon()
	return k.out
}

// abandon disarms the callback, frees the scratch and unpins the output.
func (k *capture) abandon() {
	k.c.armed = 0
	C.free(unsafe.Pointer(k.c.scratch))
	k.c.out, k.c.scratch = nil, nil
	k.pin.Unpin()
	slots := unsafe.Slice((*C.int32_t)(k.c.slot), int(k.c.n_layer))
	for i := range slots {
		slots[i] = -1
	}
}
