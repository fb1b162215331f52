package client

import (
	"context"
	"time"

	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Session is one agent conversation held by the daemon.
type Session struct {
	c             *Client
	id            uint64
	contextTokens int
	compatKey     string
}

// OpenSession opens an empty session; name labels it for operators.
func (c *Client) OpenSession(ctx context.Context, name string) (*Session, error) {
	s, _, err := c.OpenSessionOptions(ctx, SessionOptions{Name: name})
	return s, err
}

// OpenSessionWith opens a session and ensures m's stable prefix in the
// same call (one round trip instead of two). When a stored snapshot starts
// with the same tokens the session resumes from it: the result's
// ResumedSnapshot names it.
func (c *Client) OpenSessionWith(ctx context.Context, name string, m Manifest) (*Session, PrefixResult, error) {
	return c.OpenSessionOptions(ctx, SessionOptions{Name: name, Manifest: &m})
}

// SessionOptions open a session with OpenSessionOptions.
type SessionOptions struct {
	Name string // a label for operators
	// Manifest, when set, is ensured in the same call (see OpenSessionWith).
	Manifest *Manifest
	// Cold sessions never resume from a snapshot, are never snapshotted
	// automatically, and neither copy KV from other live sessions nor
	// lend theirs: for measuring or verifying cold prefill.
	Cold bool
}

// OpenSessionOptions opens a session as o says; the PrefixResult is set
// when o.Manifest is. On error no session is left open.
func (c *Client) OpenSessionOptions(ctx context.Context, o SessionOptions) (*Session, PrefixResult, error) {
	req := &pb.OpenSessionRequest{Name: o.Name, Cold: o.Cold}
	if o.Manifest != nil {
		req.Manifest = protocol.ManifestToWire(o.Manifest.policyManifest())
	}
	r, err := c.do(ctx, &pb.Request{Body: &pb.Request_OpenSession{OpenSession: req}}, nil)
	if err != nil {
		return nil, PrefixResult{}, err
	}
	op := r.GetOpenSession()
	s := &Session{c: c, id: op.GetSessionId(), contextTokens: int(op.GetContextTokens()), compatKey: op.GetCompatKey()}
	return s, prefixResult(op.GetPrefix()), nil
}

// ID is the daemon's session id.
func (s *Session) ID() uint64 { return s.id }

// ContextTokens is the most tokens the session can hold.
func (s *Session) ContextTokens() int { return s.contextTokens }

// PrefixResult counts what EnsurePrefix or PrefillSuffix did.
type PrefixResult struct {
	PromptTokens    int // EnsurePrefix: stable-prefix tokens; PrefillSuffix: the whole prompt
	ReusableTokens  int // of this call's part, tokens equal to what the session held
	ReusedTokens    int // kept without recompute
	PrefilledTokens int // computed
	DroppedTokens   int // removed from the KV
	Elapsed         time.Duration
	// ResumedSnapshot names the snapshot an empty session resumed from
	// (cross-session resume); ResumedTokens came back without prefill.
	ResumedSnapshot string
	ResumedTokens   int
	// ApproximateTokens are the part of ReusedTokens whose KV is
	// approximate (moved past an early change in the prompt, or kept from
	// such a turn): exact reuse is ReusedTokens - ApproximateTokens.
	// RecomputedTokens are the part of PrefilledTokens that prefilled
	// unchanged segments again (the recompute budget); ReuseChoice says
	// what the daemon decided.
	ApproximateTokens int
	RecomputedTokens  int
	ReuseChoice       string
	// RecomputeBudget is the recompute budget segment reuse had (tokens).
	RecomputeBudget int
}

// ExactTokens are the reused tokens whose KV is what a cold prefill
// computes.
func (r PrefixResult) ExactTokens() int { return r.ReusedTokens - r.ApproximateTokens }

func prefixResult(r *pb.PrefixReply) PrefixResult {
	return PrefixResult{
		PromptTokens: int(r.GetPromptTokens()), ReusableTokens: int(r.GetReusableTokens()),
		ReusedTokens: int(r.GetReusedTokens()), PrefilledTokens: int(r.GetPrefilledTokens()),
		DroppedTokens: int(r.GetDroppedTokens()), Elapsed: time.Duration(r.GetElapsedUs()) * time.Microsecond,
		ResumedSnapshot: r.GetResumedSnapshot(), ResumedTokens: int(r.GetResumedTokens()),
		ApproximateTokens: int(r.GetApproximateTokens()), RecomputedTokens: int(r.GetRecomputedTokens()), ReuseChoice: r.GetReuseChoice(),
		RecomputeBudget: int(r.GetRecomputeBudgetTokens()),
	}
}

// EnsurePrefix makes the session hold m's stable prefix, keeping the
// longest common token prefix with what it held and prefilling the rest.
// m becomes the session's manifest for PrefillSuffix.
func (s *Session) EnsurePrefix(ctx context.Context, m Manifest) (PrefixResult, error) {
	want, onEvent := progressEvents(ctx)
	r, err := s.c.do(ctx, &pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{
		SessionId: s.id, Manifest: protocol.ManifestToWire(m.policyManifest()), Progress: want, ExactReuse: exactReuse(ctx),
	}}}, onEvent)
	if err != nil {
		return PrefixResult{}, err
	}
	return prefixResult(r.GetEnsurePrefix()), nil
}

// PrefillSuffix prefills the manifest's non-stable segments followed by
// extra, leaving the session ready to decode.
func (s *Session) PrefillSuffix(ctx context.Context, extra ...Segment) (PrefixResult, error) {
	w := make([]*pb.Segment, len(extra))
	for i, seg := range extra {
		w[i] = protocol.SegmentToWire(seg.policySegment())
	}
	want, onEvent := progressEvents(ctx)
	r, err := s.c.do(ctx, &pb.Request{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{SessionId: s.id, Extra: w, Progress: want, ExactReuse: exactReuse(ctx)}}}, onEvent)
	if err != nil {
		return PrefixResult{}, err
	}
	return prefixResult(r.GetPrefillSuffix()), nil
}

// DecodeOptions select how many tokens to generate and how.
type DecodeOptions struct {
	MaxTokens   int
	Temperature float32 // 0: greedy
	TopK        int
	TopP        float32
	Seed        uint64
	Stop        []string // stop after generating any of these
	// ReturnLogits attaches each step's full logits to its Token.
	ReturnLogits bool
	// Forced, when set, are fed one by one instead of sampled (teacher
	// forcing, for scoring); MaxTokens must equal len(Forced) and each
	// Token's Predicted is what the model (sampler) would have chosen.
	Forced []int32
	// NoStream asks for no per-token events: only the final text.
	NoStream bool
}

// Token is one generated token, delivered as soon as it is sampled.
type Token struct {
	ID      int32
	Piece   string
	Elapsed time.Duration // since the call started
	Logits  []float32     // with ReturnLogits
	// Predicted is the sampled token; with Forced it may differ from ID.
	Predicted int32
}

// DecodeResult ends a Decode.
type DecodeResult struct {
	Reason  StopReason    // why the decode ended
	Tokens  int           // tokens generated (and kept in the session)
	Text    string        // their text
	Elapsed time.Duration // the daemon's time for the call
}

// Decode generates up to o.MaxTokens tokens, calling onToken (may be nil)
// for each as it arrives. Cancelling ctx, or onToken returning an error,
// stops the daemon within one token of receiving the cancel; onToken is
// not called after ctx is done. Decode then returns ctx.Err() or onToken's
// error; the tokens generated stay in the session.
func (s *Session) Decode(ctx context.Context, o DecodeOptions, onToken func(Token) error) (DecodeResult, error) {
	req := &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{
		SessionId: s.id, MaxTokens: int32(o.MaxTokens), Stop: o.Stop, ReturnLogits: o.ReturnLogits, ForcedTokens: o.Forced, NoStream: o.NoStream,
		Sampling: &pb.SamplingParams{Temperature: o.Temperature, TopK: int32(o.TopK), TopP: o.TopP, Seed: o.Seed},
	}}}
	var onEvent func(*event) error
	if onToken != nil {
		onEvent = func(ev *event) error {
			if ev.msg == nil { // decoded on the fast path
				return onToken(ev.token)
			}
			t := ev.msg.GetToken()
			if t == nil {
				return nil
			}
			return onToken(Token{ID: t.GetToken(), Piece: t.GetPiece(), Elapsed: time.Duration(t.GetElapsedUs()) * time.Microsecond, Logits: t.GetLogits(), Predicted: t.GetPredicted()})
		}
	}
	r, err := s.c.do(ctx, req, onEvent)
	d := r.GetDecode()
	res := DecodeResult{Reason: stopReasonFromWire(d.GetReason()), Tokens: int(d.GetTokens()), Text: d.GetText(), Elapsed: time.Duration(d.GetElapsedUs()) * time.Microsecond}
	if err == nil && res.Reason == StopCancelled && ctx.Err() != nil {
		err = ctx.Err()
	}
	return res, err
}

// Explain reports what the session holds.
func (s *Session) Explain(ctx context.Context) (Explanation, error) {
	return s.c.Explain(ctx, s.id)
}

// Close frees the session's KV on the daemon.
func (s *Session) Close(ctx context.Context) error {
	_, err := s.c.do(ctx, &pb.Request{Body: &pb.Request_CloseSession{CloseSession: &pb.CloseSessionRequest{SessionId: s.id}}}, nil)
	return err
}
