package llama

/*
#include <stdlib.h>
#include <stdint.h>
#include "llama.h"
#include "ggml-cpu.h"

// ctxd_threadpool makes ggml's CPU worker threads for a context: poll 0
// parks idle workers on a condition variable instead of spinning, so
// between decode calls they take no core from the agent.
static struct ggml_threadpool *ctxd_threadpool(int n) {
	struct ggml_threadpool_params p = ggml_threadpool_params_default(n);
	p.poll = 0;
	return ggml_threadpool_new(&p);
}

static bool ctxd_abort_cb(void *data) {
	return __atomic_load_n((int32_t *)data, __ATOMIC_RELAXED) != 0;
}
static void ctxd_set_abort(int32_t *flag, int32_t v) { __atomic_store_n(flag, v, __ATOMIC_RELAXED); }
static void ctxd_attach_abort(struct llama_context_params *p, int32_t *flag) {
	p->abort_callback = ctxd_abort_cb;
	p->abort_callback_data = flag;
}
static void ctxd_batch_set(struct llama_batch *b, int i, llama_token t, llama_pos p, llama_seq_id s, int8_t out) {
	b->token[i] = t;
	b->pos[i] = p;
	b->n_seq_id[i] = 1;
	b->seq_id[i][0] = s;
	b->logits[i] = out;
}
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

const seqMax = 2

// Context is a llama.cpp context: one KV cache with a session sequence and
// a scratch sequence.
type Context struct {
	model *Model
	ctx   *C.struct_llama_context
	mem   C.llama_memory_t
	batch C.struct_llama_batch
	abort *C.int32_t
	// abortAtStart (tests only) sets the abort flag as a decode starts, as
	// a cancel arriving at once would.
	abortAtStart bool
	opts         engine.ContextOptions
	nCtx         int
	seq          engine.PosSet // occupied positions of the session sequence
	logits       []float32
	hasLogits    bool
	closed       bool
	pool         *C.struct_ggml_threadpool // opts.Threads workers
	pool1        *C.struct_ggml_threadpool // one thread, for calls that chose one; nil when pool has one
	load         cpuLoad
	threads      int // ggml threads set for the current call (0: none yet)
	// What status reads while a call runs (Threads, ThreadsReason): the
	// threads of the last call and the reasons of the last batch's and
	// the last single-token step's policy.ThreadsDecision.
	threadsNow atomic.Int32
	batchWhy   atomic.Pointer[string]
	decodeWhy  atomic.Pointer[string]
	memory     engine.ContextMemory
	evalcb     *evalState // graph callback state; nil: made without (benchmarks)
	// shiftPending: cells were moved since the last llama_decode, so
	// their K is not rotated yet (applyShifts).
	shiftPending bool
}

// NewContext creates a context with n_seq_max = 2 and a unified KV buffer.
func (md *Model) NewContext(o engine.ContextOptions) (engine.Context, error) {
	return md.newContext(o)
}

func (md *Model) newContext(o engine.ContextOptions) (*Context, error) {
	return md.newContextEval(o, true)
}

// newContextEval is newContext; withEval false leaves llama.cpp's graph
// callback unset (DecodeCapture then fails), for measuring what the
// disarmed callback costs.
func (md *Model) newContextEval(o engine.ContextOptions, withEval bool) (*Context, error) {
	if err := md.alive(); err != nil {
		return nil, err
	}
	o, err := o.Resolve(md.facts)
	if err != nil {
		return nil, err
	}
	var kt C.enum_ggml_type
	switch o.KVType {
	case policy.KVTypeF32:
		kt = C.GGML_TYPE_F32
	case policy.KVTypeQ8_0:
		kt = C.GGML_TYPE_Q8_0
	default:
		kt = C.GGML_TYPE_F16
	}
	cp := C.llama_context_default_params()
	cp.n_ctx = C.uint32_t(o.ContextTokens)
	cp.n_batch = C.uint32_t(o.BatchTokens)
	cp.n_ubatch = C.uint32_t(o.BatchTokens)
	cp.n_seq_max = seqMax
	cp.kv_unified = true
	cp.n_threads = C.int32_t(o.DecodeThreads)
	cp.n_threads_batch = C.int32_t(o.Threads)
	cp.type_k = kt
	cp.type_v = kt
	cp.no_perf = true
	if o.FlashAttention {
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_ENABLED
	} else {
		cp.flash_attn_type = C.LLAMA_FLASH_ATTN_TYPE_DISABLED
	}
	// The KV cache and the attention ops go where the layers are.
	cp.offload_kqv = true
	abort := (*C.int32_t)(C.calloc(1, 4))
	C.ctxd_attach_abort(&cp, abort)
	var eval *evalState
	if withEval {
		// The graph callback is set for the context's life; disarmed it
		// answers at once (DecodeCapture arms it).
		if eval = newEvalState(md.facts.Layers); eval == nil {
			C.free(unsafe.Pointer(abort))
			return nil, fmt.Errorf("%w: no memory for the graph callback state", engine.ErrContextFull)
		}
		attachEval(&cp, eval)
	}
	freeNative := func() {
		C.free(unsafe.Pointer(abort))
		if eval != nil {
			freeEvalState(eval)
		}
	}
	var ctx *C.struct_llama_context
	bufs := captureBuffers(func() { ctx = C.llama_init_from_model(md.m, cp) })
	if ctx == nil {
		freeNative()
		return nil, fmt.Errorf("%w: llama.cpp could not create a %d-token context (out of memory?)", engine.ErrContextFull, o.ContextTokens)
	}
	pool := C.ctxd_threadpool(C.int(o.Threads))
	if pool == nil {
		C.llama_free(ctx)
		freeNative()
		return nil, fmt.Errorf("%w: ggml could not start %d CPU threads", engine.ErrContextFull, o.Threads)
	}
	// A call that chose one thread runs on a pool without workers: on the
	// full pool ggml's kickoff would wake every sleeping worker and hand
	// the pool's mutex around with them, so beside a busy core the
	// computing thread waited, call after call, for a worker that only
	// had to see there was nothing for it to do.
	var pool1 *C.struct_ggml_threadpool
	if o.Threads > 1 {
		if pool1 = C.ctxd_threadpool(1); pool1 == nil {
			C.ggml_threadpool_free(pool)
			C.llama_free(ctx)
			freeNative()
			return nil, fmt.Errorf("%w: ggml could not make a one-thread pool", engine.ErrContextFull)
		}
	}
	C.llama_attach_threadpool(ctx, pool, pool)
	c := &Context{
		model:  md,
		ctx:    ctx,
		mem:    C.llama_get_memory(ctx),
		batch:  C.llama_batch_init(C.int32_t(o.BatchTokens), 0, seqMax),
		abort:  abort,
		opts:   o,
		nCtx:   int(C.llama_n_ctx(ctx)),
		pool:   pool,
		pool1:  pool1,
		evalcb: eval,
	}
	dev := md.facts.Placement.Device.Name
	c.memory = engine.ContextMemory{
		DeviceKVBytes:      bufs.on("KV", dev),
		HostKVBytes:        bufs.total("KV") - bufs.on("KV", dev),
		DeviceComputeBytes: bufs.on("compute", dev),
		HostComputeBytes:   bufs.total("compute") - bufs.on("compute", dev),
	}
	c.logits = make([]float32, md.facts.VocabSize)
	md.mu.Lock()
	md.open++
	md.mu.Unlock()
	return c, nil
}

// Options returns the options the context was made with (defaults filled).
func (c *Context) Options() engine.ContextOptions { return c.opts }

// Size is the number of KV cells.
func (c *Context) Size() int { return c.nCtx }

// Used is the number of occupied positions of the session sequence.
func (c *Context) Used() int { return c.seq.Len() }

// Occupied reports whether position p holds a token.
func (c *Context) Occupied(p int) bool { return c.seq.Contains(p) }

// Decode runs tokens at positions pos0.. of the session sequence, in
// batches, keeping the logits of the last token.
func (c *Context) Decode(ctx context.Context, tokens []engine.Token, pos0 int) error {
	if len(tokens) == 0 && !c.closed {
		return nil
	}
	if err := c.checkDecode(ctx, tokens, pos0); err != nil {
		return err
	}
	return c.decode(ctx, tokens, pos0, nil)
}

// checkDecode validates a decode of tokens at pos0 (at least one token).
func (c *Context) checkDecode(ctx context.Context, tokens []engine.Token, pos0 int) error {
	if c.closed {
		return engine.ErrClosed
	}
	n := len(tokens)
	if n == 0 {
		return fmt.Errorf("%w: no tokens", engine.ErrInvalidArgument)
	}
	if pos0 < 0 || pos0+n > engine.MaxPos {
		return fmt.Errorf("%w: positions [%d,%d)", engine.ErrInvalidArgument, pos0, pos0+n)
	}
	if c.seq.Count(pos0, pos0+n) != 0 {
		return fmt.Errorf("%w: positions [%d,%d) already hold tokens", engine.ErrInvalidArgument, pos0, pos0+n)
	}
	if c.seq.Len() > 0 && pos0 != c.seq.Max() {
		// llama.cpp refuses a batch that does not start right after the
		// sequence's last position.
		return fmt.Errorf("%w: decode at %d, not right after the last position %d", engine.ErrInvalidArgument, pos0, c.seq.Max()-1)
	}
	if c.seq.Len()+n > c.nCtx {
		return fmt.Errorf("%w: %d tokens resident + %d new > %d cells", engine.ErrContextFull, c.seq.Len(), n, c.nCtx)
	}
	vocab := engine.Token(c.model.facts.VocabSize)
	for i, t := range tokens {
		if t < 0 || t >= vocab {
			return fmt.Errorf("%w: token %d at index %d is outside the vocabulary [0,%d)", engine.ErrInvalidArgument, t, i, vocab)
		}
	}
	return ctx.Err()
}

// decode runs a checked decode; with k it also captures (k is finished
// or abandoned by the caller).
func (c *Context) decode(ctx context.Context, tokens []engine.Token, pos0 int, k *capture) error {
	n := len(tokens)
	// Pending K rotations run before the abort is armed: llama.cpp rotates
	// layer after layer and forgets the shift only when all succeeded, so
	// a cancel landing part-way would have the retry rotate the first
	// layers twice (TestAbortNeverLandsInAShift).
	c.applyShifts()
	stop := context.AfterFunc(ctx, func() { C.ctxd_set_abort(c.abort, 1) })
	if c.abortAtStart { // tests: a cancel that lands at once
		C.ctxd_set_abort(c.abort, 1)
	}
	defer func() {
		stop()
		C.ctxd_set_abort(c.abort, 0)
	}()
	c.hasLogits = false
	bs := c.opts.BatchTokens
	for off := 0; off < n; off += bs {
		end := min(off+bs, n)
		c.setThreads(end - off)
		c.batch.n_tokens = C.int32_t(end - off)
		for i := off; i < end; i++ {
			out := C.int8_t(0)
			if i == n-1 {
				out = 1
			}
			C.ctxd_batch_set(&c.batch, C.int(i-off), C.llama_token(tokens[i]), C.llama_pos(pos0+i), engine.SessionSeq, out)
		}
		if k != nil {
			k.beginBatch(off, end)
		}
		rc := C.llama_decode(c.ctx, c.batch)
		c.noteDecoded(rc)
		var capErr error
		if k != nil {
			capErr = k.endBatch()
		}
		if rc != 0 || ctx.Err() != nil || capErr != nil {
			// Drop whatever this call put in the KV so the record stays exact.
			C.llama_memory_seq_rm(c.mem, engine.SessionSeq, C.llama_pos(pos0), C.llama_pos(pos0+n))
			c.seq.Remove(pos0, pos0+n)
			if err := ctx.Err(); err != nil {
				return err
			}
			if rc == 0 {
				return capErr
			}
			switch rc {
			case 1:
				return fmt.Errorf("%w: no KV slot for a batch of %d", engine.ErrContextFull, end-off)
			default:
				return fmt.Errorf("%w: llama_decode returned %d", engine.ErrDecode, int(rc))
			}
		}
		c.seq.Add(pos0+off, pos0+end)
	}
	p := C.llama_get_logits_ith(c.ctx, -1)
	if p == nil {
		return fmt.Errorf("%w: no logits after decode", engine.ErrDecode)
	}
	copy(c.logits, unsafe.Slice((*float32)(unsafe.Pointer(p)), len(c.logits)))
	c.hasLogits = true
	return nil
}

// applyShifts makes llama.cpp rotate the K of moved cells now. Shift and
// a moving InsertRange only record the move (the cells' positions change
// at once, their K is rotated at the start of the next llama_decode), and
// the state bytes are written as they are: bytes taken before that decode
// would hold new positions with K still rotated for the old ones. One
// token decoded into the (empty) scratch sequence runs the rotation; it
// is removed again, and the logits were already invalid after the move.
func (c *Context) applyShifts() {
	if !c.shiftPending {
		return
	}
	c.setThreads(1)
	c.batch.n_tokens = 1
	C.ctxd_batch_set(&c.batch, 0, C.llama_token(max(c.model.facts.BOS, 0)), 0, engine.ScratchSeq, 1)
	rc := C.llama_decode(c.ctx, c.batch)
	C.llama_memory_seq_rm(c.mem, engine.ScratchSeq, -1, -1)
	// The rotation runs before the batch looks for a cell: also a full
	// cache (rc 1) had it applied.
	c.noteDecoded(rc)
	c.hasLogits = false
}

// noteDecoded records what a llama_decode returning rc did to pending
// shifts: llama.cpp applies them before placing the batch, so they are
// done unless the call failed or was aborted before or during them.
func (c *Context) noteDecoded(rc C.int32_t) {
	if rc == 0 || rc == 1 {
		c.shiftPending = false
	}
}

// setThreads sizes ggml's CPU threads for a batch of n tokens
// (policy.ComputeThreads): pinned by ThreadsPinned, else to the cores other
// processes leave free now, a single token at most DecodeThreads, a batch
// at most Threads.
func (c *Context) setThreads(n int) {
	limit := c.opts.Threads
	if n == 1 {
		limit = c.opts.DecodeThreads
	}
	p := c.model.facts.Placement
	in := policy.ComputeThreadsInput{
		CPUs: runtime.NumCPU(), Max: limit,
		Offloaded: p.OutputOnGPU && p.GPULayers == c.model.facts.Layers,
	}
	if c.opts.ThreadsPinned {
		in.Pinned = c.opts.Threads
	} else {
		in.Others, in.Measured = c.load.sample(time.Now())
	}
	d := policy.ComputeThreads(in)
	why := &c.batchWhy
	if n == 1 {
		why = &c.decodeWhy
	}
	if p := why.Load(); p == nil || *p != d.Reason {
		why.Store(&d.Reason)
	}
	if d.Threads != c.threads {
		if c.pool1 != nil {
			// ggml pauses the pool it leaves: its workers sleep until it
			// is used again.
			pool := c.pool
			if d.Threads == 1 {
				pool = c.pool1
			}
			C.llama_attach_threadpool(c.ctx, pool, pool)
		}
		C.llama_set_n_threads(c.ctx, C.int32_t(d.Threads), C.int32_t(d.Threads))
		c.threads = d.Threads
		c.threadsNow.Store(int32(d.Threads))
	}
}

// Threads is the number of CPU threads the last decode call ran with. It
// may be called while a call runs (status does).
func (c *Context) Threads() int { return int(c.threadsNow.Load()) }

// ThreadsReason says how the last batch and the last single-token step
// chose their threads (policy.ComputeThreads), for status. It may be
// called while a call runs.
func (c *Context) ThreadsReason() string {
	var parts []string
	if p := c.batchWhy.Load(); p != nil {
		parts = append(parts, "batches "+*p)
	}
	if p := c.decodeWhy.Load(); p != nil {
		parts = append(parts, "single tokens "+*p)
	}
	return strings.Join(parts, "; ")
}

// Memory reports the KV and compute buffers llama.cpp allocated for the
// context, on the model's device and in host memory.
func (c *Context) Memory() engine.ContextMemory { return c.memory }

// Logits of the last decoded token (nil before any decode).
func (c *Context) Logits() []float32 {
	if !c.hasLogits {
		return nil
	}
	return c.logits
}

// Clear empties the whole KV cache.
func (c *Context) Clear() {
	if c.closed {
		return
	}
	C.llama_memory_clear(c.mem, true)
	c.shiftPending = false
	c.seq.Reset()
	c.hasLogits = false
}

// Close frees the context.
func (c *Context) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	C.llama_batch_free(c.batch)
	C.llama_free(c.ctx)
	C.ggml_threadpool_free(c.pool)
	if c.pool1 != nil {
		C.ggml_threadpool_free(c.pool1)
	}
	C.free(unsafe.Pointer(c.abort))
	if c.evalcb != nil {
		freeEvalState(c.evalcb)
		c.evalcb = nil
	}
	c.ctx = nil
	c.model.mu.Lock()
	c.model.open--
	c.model.mu.Unlock()
	return nil
}

var _ engine.Context = (*Context)(nil)
