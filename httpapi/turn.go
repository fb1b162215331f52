package httpapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// decodeParams are a request's generation settings.
type decodeParams struct {
	maxTokens int // requested; 0 = as many as fit, at most the trained window
	sampling  *pb.SamplingParams
	stop      []string
}

// turnHooks connect a turn to the response being written.
type turnHooks struct {
	prefilled func(turnResult)   // the prompt is in the KV: its part of the result is known
	progress  func()             // the prefill moved on (about every 100 ms)
	text      func(string) error // generated text that is safe to show; an error cancels the decode
}

// turnResult is what one turn did, for usage and timings.
type turnResult struct {
	promptTokens    int // the whole prompt
	cachedTokens    int // prompt tokens whose KV was reused exactly (as a cold prefill computes it)
	approxTokens    int // prompt tokens whose reused KV is approximate (moved past an early change)
	recomputed      int // of prefilledTokens, tokens of unchanged segments prefilled again
	prefilledTokens int // prompt tokens evaluated
	resumed         string
	promptDur       time.Duration
	decodedTokens   int
	decodeDur       time.Duration
	reason          pb.StopReason
	text            string // generated, cut before any stop string
	stopString      string // the stop string that ended it (reason STOP_STRING)
	requestedMax    int
	grantedMax      int
	clamped         bool
}

// call runs one request against the daemon as the door's connection.
func (s *Server) call(ctx context.Context, req *pb.Request, emit func(*pb.StreamEvent) error) (*pb.Response, error) {
	resp := s.backend.Handle(ctx, s.connID, req, emit)
	if e := resp.GetError(); e != nil {
		err := protocol.FromWire(e)
		s.noteError(err)
		return nil, err
	}
	return resp, nil
}

// runTurn prefills m into ls and decodes. The session is locked by the
// caller. A failed or cancelled turn leaves the session consistent (the
// daemon guarantees it); one the daemon lost is dropped from the table.
func (s *Server) runTurn(ctx context.Context, ls *liveSession, mi *modelInfo, m policy.Manifest, p decodeParams, h turnHooks) (turnResult, error) {
	var r turnResult
	progress := func(ev *pb.StreamEvent) error {
		if ev.GetProgress() != nil && h.progress != nil {
			h.progress()
		}
		return nil
	}
	start := time.Now()
	resp, err := s.call(ctx, &pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{
		SessionId: ls.id, Manifest: protocol.ManifestToWire(m), Progress: h.progress != nil, ExactReuse: exactReuse(ctx)}}}, progress)
	if err != nil {
		return r, s.turnError(ctx, ls, err)
	}
	ep := resp.GetEnsurePrefix()
	resp, err = s.call(ctx, &pb.Request{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{
		SessionId: ls.id, Progress: h.progress != nil, ExactReuse: exactReuse(ctx)}}}, progress)
	if err != nil {
		return r, s.turnError(ctx, ls, err)
	}
	ps := resp.GetPrefillSuffix()
	r.promptDur = time.Since(start)
	r.promptTokens = int(ps.GetPromptTokens())
	r.approxTokens = int(ep.GetApproximateTokens() + ps.GetApproximateTokens())
	r.cachedTokens = int(ep.GetReusedTokens()+ps.GetReusedTokens()) - r.approxTokens
	r.recomputed = int(ep.GetRecomputedTokens() + ps.GetRecomputedTokens())
	r.prefilledTokens = int(ep.GetPrefilledTokens() + ps.GetPrefilledTokens())
	r.resumed = ep.GetResumedSnapshot()
	if h.prefilled != nil {
		h.prefilled(r)
	}

	room := ls.contextTokens - r.promptTokens
	r.requestedMax = p.maxTokens
	r.grantedMax = p.maxTokens
	if p.maxTokens <= 0 {
		// Unbounded requests stop at the end of generation, or after a
		// trained window's worth of tokens.
		r.grantedMax = min(room, max(mi.trainedContext, 1))
	} else if p.maxTokens > room {
		r.grantedMax, r.clamped = room, true
		s.log.Info("max_tokens clamped to what fits", "session", ls.id, "requested", p.maxTokens, "granted", room,
			"prompt_tokens", r.promptTokens, "session_tokens", ls.contextTokens)
	}
	if r.grantedMax <= 0 {
		r.grantedMax, r.reason = 0, pb.StopReason_STOP_REASON_CONTEXT_FULL
		return r, nil
	}
	stops := append(append([]string(nil), p.stop...), mi.tmpl.StopStrings()...)
	filter := &stopFilter{stops: stops}
	var textErr error
	emit := func(ev *pb.StreamEvent) error {
		tok := ev.GetToken()
		if tok == nil {
			return nil
		}
		if t := filter.push(tok.GetPiece()); t != "" && h.text != nil {
			if err := h.text(t); err != nil {
				textErr = err
				return err
			}
		}
		return nil
	}
	dstart := time.Now()
	resp, err = s.call(ctx, &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{
		SessionId: ls.id, MaxTokens: int32(min(r.grantedMax, 1<<20)), Sampling: p.sampling, Stop: stops}}}, emit)
	r.decodeDur = time.Since(dstart)
	if err != nil {
		return r, s.turnError(ctx, ls, err)
	}
	d := resp.GetDecode()
	r.decodedTokens, r.reason, r.text = int(d.GetTokens()), d.GetReason(), d.GetText()
	if r.reason == pb.StopReason_STOP_REASON_STOP_STRING {
		r.stopString = filter.matched
	}
	if textErr != nil || r.reason == pb.StopReason_STOP_REASON_CANCELLED {
		return r, fmt.Errorf("%w: the client went away during decode", protocol.ErrCancelled)
	}
	if h.text != nil {
		if t := filter.rest(r.text); t != "" {
			if err := h.text(t); err != nil {
				return r, fmt.Errorf("%w: %w", protocol.ErrCancelled, err)
			}
		}
	}
	return r, nil
}

// turnError drops a session the daemon no longer has; other failures
// leave it consistent and in the table.
func (s *Server) turnError(ctx context.Context, ls *liveSession, err error) error {
	if errors.Is(err, protocol.ErrNotFound) || errors.Is(err, protocol.ErrIncompatible) {
		s.table.drop(ctx, ls)
	}
	return err
}

// finishReason is OpenAI's name for why a decode ended.
func finishReason(r pb.StopReason, toolCalls bool) string {
	switch {
	case toolCalls:
		return "tool_calls"
	case r == pb.StopReason_STOP_REASON_MAX_TOKENS || r == pb.StopReason_STOP_REASON_CONTEXT_FULL:
		return "length"
	}
	return "stop"
}
