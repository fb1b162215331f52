package engine

import (
	"context"
	"errors"

	"github.com/ctxd/ctxd/policy"
)

// Token is a vocabulary id.
type Token = int32

// Sentinel errors of engine calls.
var (
	ErrInvalidArgument = errors.New("engine: invalid argument")
	ErrContextFull     = errors.New("engine: context full")
	ErrBadModel        = errors.New("engine: bad model file")
	ErrDecode          = errors.New("engine: decode failed")
	ErrClosed          = errors.New("engine: closed")
	ErrNoShift         = errors.New("engine: model cannot shift positions")
)

// SessionSeq is the sequence holding a session's KV; ScratchSeq is the
// scratch sequence used by range moves. Contexts have at least two.
const (
	SessionSeq = 0
	ScratchSeq = 1
)

// Facts describes a loaded model.
type Facts struct {
	Path           string
	Digest         string // sha256 of the file, hex
	Description    string
	Layers         int
	KVHeads        int
	HeadDim        int
	TrainedContext int
	VocabSize      int
	WeightsBytes   int64
	BOS            Token
	AddBOS         bool
	CanShift       bool // positions can be moved (RoPE models)
	Embd           int
	Heads          int
	Placement      Placement // where the weights went
	// What a chat adapter needs to render conversations for the model:
	// the file's chat template (tokenizer.chat_template; "" when it has
	// none), its architecture (general.architecture), and the texts of its
	// BOS and EOS tokens.
	ChatTemplate     string
	Architecture     string
	BOSText, EOSText string
}

// KVBytesPerToken is the KV cache cost of one token at kv.
func (f Facts) KVBytesPerToken(kv policy.KVType) int64 {
	return policy.KVBytesPerToken(f.Layers, f.KVHeads, f.HeadDim, kv)
}

// ContextOptions configures a new context.
type ContextOptions struct {
	ContextTokens  int           // KV cells
	BatchTokens    int           // largest batch per decode step; 0 = DefaultBatchTokens (Resolve)
	KVType         policy.KVType // f16 or q8_0 (q8_0 needs flash attention)
	FlashAttention bool
	// Threads and DecodeThreads are ceilings: each call runs with fewer
	// when other processes hold cores (policy.ComputeThreads), unless
	// ThreadsPinned: then every call runs with Threads.
	Threads       int // prefill batches; 0 = all CPUs
	DecodeThreads int // single-token steps; 0 = Threads
	ThreadsPinned bool
}

// Model is a loaded model file. The slot reads its Facts and makes its one
// Context; sessions tokenize their segments and turn generated tokens into
// text.
type Model interface {
	// Facts describes the model; it never changes after the load.
	Facts() Facts
	// Tokenize turns text into tokens; addBOS prepends BOS when the model
	// uses it. Special-token texts in text stay text: user text can never
	// forge a control token.
	Tokenize(text string, addBOS bool) ([]Token, error)
	// TokenizeSpecial is Tokenize with the texts of the model's special
	// (control) tokens parsed: "<|im_start|>" becomes that token where
	// the vocabulary has it. Only for text known to be a template's
	// control markers, never for message content.
	TokenizeSpecial(text string) ([]Token, error)
	// Piece is the text of one token, as it appears in generated text.
	Piece(t Token) string
	// IsEOG reports whether t ends generation.
	IsEOG(t Token) bool
	// NewContext makes a KV cache with at least two sequences (SessionSeq,
	// ScratchSeq); unusable options wrap ErrInvalidArgument, a cache that
	// cannot be allocated ErrContextFull.
	NewContext(opts ContextOptions) (Context, error)
	// Close frees the model; it fails (ErrInvalidArgument) while contexts
	// made from it are open.
	Close() error
}

// Range is a token range of sequence 0 extracted as bytes.
type Range struct {
	Pos0  int    // position of its first token when extracted
	Count int    // tokens
	Blob  []byte // engine state bytes; opaque, keyed by the context's settings
}

// SeqState is a whole saved sequence.
type SeqState struct {
	Positions []int // occupied positions, ascending
	Blob      []byte
}

// Context is one KV cache with decode. Its methods fall in three groups by
// caller: decoding and sampling (a session's prefill and Decode), moving
// ranges of sequence 0 (the hot set: eviction, retrieval, compaction;
// snapshots), and whole-sequence moves (parking a dense session). Every
// position argument is checked against what sequence 0 holds: a range
// outside it, or onto occupied positions, wraps ErrInvalidArgument and
// changes nothing. engine/enginefake implements the same checks in Go.
type Context interface {
	// Options returns the options the context was made with, defaults
	// filled.
	Options() ContextOptions
	// Decode runs tokens at positions pos0.. in sequence 0 and keeps the
	// logits of the last token. pos0 must follow the last position the
	// sequence holds (llama.cpp keeps a sequence's positions consecutive:
	// to fill a hole, take what lies above it out with ExtractRange and put
	// it back with InsertRange after the decode); anything else wraps
	// ErrInvalidArgument. It stops between and inside batches when
	// ctx is done, returning ctx.Err() with nothing of the call left in the KV.
	Decode(ctx context.Context, tokens []Token, pos0 int) error
	// Logits of the last decoded token; valid until the next Decode.
	Logits() []float32
	// Sample picks the next token from the last logits with s; -1 when
	// there are none or s is not this engine's.
	Sample(s Sampler) Token
	// NewSampler makes a sampler chain; bad parameters wrap
	// ErrInvalidArgument.
	NewSampler(p SamplingParams) (Sampler, error)

	// Used is the number of occupied positions of sequence 0.
	Used() int

	// Range moves. Each leaves no logits (Logits returns nil until the
	// next Decode).

	// Remove drops positions [p0,p1) of sequence 0 (p1 < 0: to the end)
	// and returns how many tokens were dropped.
	Remove(p0, p1 int) (int, error)
	// Shift moves positions [p0,p1) of sequence 0 by delta onto free,
	// non-negative positions; ErrNoShift when the model cannot move
	// positions (Facts.CanShift false).
	Shift(p0, p1, delta int) error
	// ExtractRange copies the fully occupied positions [p0,p1) of
	// sequence 0 out as bytes; the range stays in the KV.
	ExtractRange(p0, p1 int) (Range, error)
	// InsertRange puts r back into sequence 0 at [at, at+r.Count), onto
	// free positions; at != r.Pos0 needs Facts.CanShift (ErrNoShift).
	// Bytes that are not a range of a context like this one wrap
	// ErrInvalidArgument; no room wraps ErrContextFull.
	InsertRange(r Range, at int) error

	// Whole-sequence moves.

	// SaveSeq copies the whole of sequence 0 out (empty: a zero SeqState).
	SaveSeq() (SeqState, error)
	// LoadSeq replaces sequence 0 with s; sequence 0 is emptied first, so
	// a refused state (ErrInvalidArgument, ErrContextFull) leaves it empty.
	LoadSeq(s SeqState) error
	// Clear empties every sequence.
	Clear()
	// Memory reports where the context's KV and compute buffers live
	// (Status).
	Memory() ContextMemory
	// Close frees the context; calls after it return ErrClosed.
	Close() error
}

// ContextMemory is what a context allocated, by place.
type ContextMemory struct {
	DeviceKVBytes      int64
	HostKVBytes        int64
	DeviceComputeBytes int64
	HostComputeBytes   int64
}

// SamplingParams selects greedy (Temperature == 0) or seeded sampling.
type SamplingParams struct {
	Temperature float32
	TopK        int
	TopP        float32
	Seed        uint64
}

// Sampler is a sampler chain; Close frees it.
type Sampler interface {
	Close()
}
