package sidecar

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// The session calls: OpenSession, EnsurePrefix, PrefillSuffix, Decode and
// CloseSession, and the sessions' lifetime (opening, finding, closing).
// Each call takes the session's call lock and the engine token
// (withSession) and drives the session's layout.

// formatVersion versions the meaning of KV bytes and tapes; part of every
// compatibility key.
const formatVersion = 1

// templates renders segments to text; "plain" (or empty) uses each
// segment's text as is.
var templates = map[string]bool{"": true, "plain": true}

// renderedPrefix starts the template name of a manifest whose segment
// texts a client rendered with a chat template of its own ("chat:chatml"):
// the daemon uses the texts as is, as under plain, and the name enters the
// compatibility key, so KV of prompts rendered by different templates
// never mixes.
const renderedPrefix = "chat:"

// knownTemplate reports whether the daemon can take manifests of template name.
func knownTemplate(name string) bool {
	return templates[name] || strings.HasPrefix(name, renderedPrefix) && len(name) > len(renderedPrefix) && len(name) <= 128
}

func (srv *Server) openSession(ctx context.Context, connID uint64, r *pb.OpenSessionRequest) (*pb.OpenSessionReply, error) {
	if len(r.GetName()) > 256 {
		return nil, fmt.Errorf("%w: session name longer than 256 bytes", protocol.ErrInvalidArgument)
	}
	if err := srv.slot.acquire(ctx); err != nil {
		return nil, err
	}
	defer srv.slot.release()
	if srv.slot.model == nil {
		return nil, protocol.ErrNoModel
	}
	srv.mu.Lock()
	srv.nextSession++
	sess := newSession(srv.nextSession, r.GetName(), connID)
	sess.ephemeral = r.GetCold()
	srv.sessions[sess.id] = sess
	srv.mu.Unlock()
	srv.slot.holders++
	srv.log.Debug("session opened", "session", sess.id, "name", sess.name, "conn", connID)
	sess.layout = srv.newLayout(sess)
	srv.publishSession(sess)
	return &pb.OpenSessionReply{SessionId: sess.id, ContextTokens: int64(srv.slot.sessionTokens()), CompatKey: srv.compatKey("plain")}, nil
}

// openWithManifest opens a session and ensures its manifest at once, so a
// manifest whose stable prefix matches a snapshot resumes from it.
func (srv *Server) openWithManifest(ctx context.Context, connID uint64, r *pb.OpenSessionRequest) (*pb.OpenSessionReply, error) {
	rep, err := srv.openSession(ctx, connID, r)
	if err != nil || r.GetManifest() == nil {
		return rep, err
	}
	pr, err := srv.ensurePrefix(ctx, connID, &pb.EnsurePrefixRequest{SessionId: rep.SessionId, Manifest: r.GetManifest()})
	if err != nil {
		if sess, e := srv.ownedSession(connID, rep.SessionId); e == nil {
			srv.dropSession(context.WithoutCancel(ctx), sess)
		}
		return nil, err
	}
	rep.Prefix = pr
	return rep, nil
}

func (srv *Server) compatKey(template string) string {
	if template == "" {
		template = "plain"
	}
	return policy.CompatKey{
		ModelDigest: srv.slot.facts.Digest, Template: template, KVType: srv.cfg.KVType,
		FlashAttention: srv.cfg.FlashAttention, ContextTokens: int64(srv.slot.contextTokens()),
		FormatVersion: formatVersion, Backend: backendSettings(srv.slot.facts.Placement),
	}.String()
}

// ssdCompatOf is the SSD tier's key prefix for blocks of a model with
// these facts and KV settings.
func ssdCompatOf(facts engine.Facts, kv policy.KVType, flashAttention bool) coldstore.Compat {
	return tiers.Compat(facts.Digest, kv, flashAttention, formatVersion, backendSettings(facts.Placement))
}

// ssdCompat is the SSD tier's key prefix for the loaded model.
func (srv *Server) ssdCompat() coldstore.Compat {
	return ssdCompatOf(srv.slot.facts, srv.cfg.KVType, srv.cfg.FlashAttention)
}

// withSession finds the caller's session, marks it busy, takes the engine
// token and makes the session resident, then runs f.
func (srv *Server) withSession(ctx context.Context, connID, id uint64, f func(*session) error) error {
	sess, err := srv.ownedSession(connID, id)
	if err != nil {
		return err
	}
	if !sess.busy.TryLock() {
		return fmt.Errorf("%w: session %d has a call in flight", protocol.ErrSessionBusy, id)
	}
	defer sess.busy.Unlock()
	if err := srv.slot.acquireAs(ctx, &sess.use); err != nil {
		return fmt.Errorf("%w: waiting for the engine: %w", protocol.ErrCancelled, err)
	}
	defer srv.slot.release()
	if sess.closed {
		return fmt.Errorf("%w: session %d is closed", protocol.ErrNotFound, id)
	}
	if srv.slot.model == nil {
		return protocol.ErrNoModel
	}
	if err := srv.slot.makeResident(sess); err != nil {
		return err
	}
	sess.version++
	srv.mu.Lock()
	sess.lastUsed = time.Now() // under mu too: anySession reads it
	srv.lastSession = sess.id
	srv.mu.Unlock()
	defer srv.publishSession(sess)
	return f(sess)
}

func prefixReply(r layout.SyncResult, start time.Time) *pb.PrefixReply {
	return &pb.PrefixReply{
		PromptTokens: int64(r.PromptTokens), ReusableTokens: int64(r.Reusable), ReusedTokens: int64(r.Reused),
		PrefilledTokens: int64(r.Prefilled), DroppedTokens: int64(r.Dropped), ElapsedUs: time.Since(start).Microseconds(),
		ApproximateTokens: int64(r.Approximate), RecomputedTokens: int64(r.Recomputed), ReuseChoice: r.ReuseChoice,
		RecomputeBudgetTokens: int64(r.Budget),
	}
}

func (srv *Server) ensurePrefix(ctx context.Context, connID uint64, r *pb.EnsurePrefixRequest) (*pb.PrefixReply, error) {
	start := time.Now()
	m := protocol.ManifestFromWire(r.GetManifest())
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", protocol.ErrInvalidManifest, err)
	}
	if !knownTemplate(m.Template) {
		return nil, fmt.Errorf("%w: unknown prompt template %q (known: plain, and %s<name> for texts a client rendered)", protocol.ErrInvalidManifest, m.Template, renderedPrefix)
	}
	var res layout.SyncResult
	var resumed string
	var resumedTokens int
	err := srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error {
		key := srv.compatKey(m.Template)
		if sess.compat != "" && sess.compat != key {
			return fmt.Errorf("%w: the session's KV was built under compatibility key %s (template %q); this manifest needs %s: open a new session",
				protocol.ErrIncompatible, sess.compat, sess.manifest.Template, key)
		}
		target, err := srv.tokenizeSegments(sess, m.StablePrefix(), true, 0)
		if err != nil {
			return err
		}
		target.Exact, target.Compat = r.GetExactReuse(), lendKey(sess, key)
		if sess.tape.Len() == 0 {
			// Cross-session resume: an empty session whose prompt starts
			// like a stored snapshot takes its KV instead of prefilling.
			resumed, resumedTokens = srv.resume(ctx, sess, target)
		}
		target.Donors = srv.donors(sess, key, target.Exact)
		res, err = sess.layout.Sync(ctx, target, false, true, false)
		if errors.Is(err, protocol.ErrContextOverflow) {
			return err // nothing was touched
		}
		if resumed != "" && err == nil {
			resumedTokens = res.Reused // with unchanged segments moved past the first change
		}
		sess.lastPrefix = prefixReply(res, start)
		// The manifest is adopted even after a partial prefill: the tape
		// says exactly what is resident.
		sess.manifest, sess.compat = &m, key
		return err
	})
	if err != nil {
		return nil, err
	}
	rep := prefixReply(res, start)
	rep.ResumedSnapshot, rep.ResumedTokens = resumed, int64(resumedTokens)
	return rep, nil
}

func (srv *Server) prefillSuffix(ctx context.Context, connID uint64, r *pb.PrefillSuffixRequest) (*pb.PrefixReply, error) {
	start := time.Now()
	extra := make([]policy.Segment, len(r.GetExtra()))
	for i, w := range r.GetExtra() {
		extra[i] = protocol.SegmentFromWire(w)
		extra[i].Stable = false
	}
	var res layout.SyncResult
	err := srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error {
		if sess.manifest == nil {
			return fmt.Errorf("%w: prefill_suffix before ensure_prefix", protocol.ErrInvalidArgument)
		}
		all := policy.Manifest{Template: sess.manifest.Template, Segments: append(append([]policy.Segment(nil), sess.manifest.Segments...), extra...)}
		if err := all.Validate(); err != nil {
			return fmt.Errorf("%w: %w", protocol.ErrInvalidManifest, err)
		}
		stable, err := srv.tokenizeSegments(sess, all.StablePrefix(), true, 0)
		if err != nil {
			return err
		}
		suffix, err := srv.tokenizeSegments(sess, all.Suffix(), false, len(stable.Tokens))
		if err != nil {
			return err
		}
		target := layout.Prompt{Tokens: append(stable.Tokens, suffix.Tokens...), Spans: append(stable.Spans, suffix.Spans...), Turn: len(stable.Tokens), Exact: r.GetExactReuse(), Compat: lendKey(sess, sess.compat)}
		target.Donors = srv.donors(sess, sess.compat, target.Exact)
		res, err = sess.layout.Sync(ctx, target, true, false, true)
		// Report the suffix part only: EnsurePrefix reported the prefix.
		base := len(stable.Tokens)
		res.Reusable = max(0, res.Reusable-base)
		res.Reused = max(0, res.Reused-base)
		if res.Reused == 0 {
			res.Approximate = 0
		} else {
			res.Approximate = min(res.Reused, max(0, res.Approximate-(base-sess.tape.ExactTokens(base))))
		}
		sess.lastPrefix = prefixReply(res, start)
		return err
	})
	if err != nil {
		return nil, err
	}
	return prefixReply(res, start), nil
}

const maxDecodeTokens = 1 << 20

func (srv *Server) decode(ctx context.Context, connID uint64, r *pb.DecodeRequest, emit Emitter) (*pb.DecodeReply, error) {
	start := time.Now()
	if r.GetMaxTokens() <= 0 || r.GetMaxTokens() > maxDecodeTokens {
		return nil, fmt.Errorf("%w: max_tokens %d outside 1..%d", protocol.ErrInvalidArgument, r.GetMaxTokens(), maxDecodeTokens)
	}
	forced := r.GetForcedTokens()
	if len(forced) > 0 && len(forced) != int(r.GetMaxTokens()) {
		return nil, fmt.Errorf("%w: %d forced tokens but max_tokens %d", protocol.ErrInvalidArgument, len(forced), r.GetMaxTokens())
	}
	for _, s := range r.GetStop() {
		if s == "" || len(s) > 1024 || !utf8.ValidString(s) {
			return nil, fmt.Errorf("%w: stop strings must be valid UTF-8 of 1..1024 bytes", protocol.ErrInvalidArgument)
		}
	}
	sp := r.GetSampling()
	params := engine.SamplingParams{Temperature: sp.GetTemperature(), TopK: int(sp.GetTopK()), TopP: sp.GetTopP(), Seed: sp.GetSeed()}
	if err := checkSampling(params); err != nil {
		return nil, err
	}
	reply := &pb.DecodeReply{}
	var out textOut
	err := srv.withSession(ctx, connID, r.GetSessionId(), func(sess *session) error {
		ectx := srv.slot.ectx
		if sess.tape.Len() == 0 {
			return fmt.Errorf("%w: decode on an empty session", protocol.ErrInvalidArgument)
		}
		if !sess.tape.HasLogits() || ectx.Logits() == nil {
			// Logits were lost (parked, or nothing prefilled).
			if err := sess.refreshLogits(ctx); err != nil {
				return err
			}
		}
		smp, err := ectx.NewSampler(params)
		if err != nil {
			return fmt.Errorf("%w: %w", protocol.ErrInvalidArgument, err)
		}
		defer smp.Close()
		sess.tape.BeginGenerated()
		// The turn has ended: invalidate_on_turn segments expire.
		defer sess.tape.EndTurn()
		limit := srv.slot.sessionTokens()
		for i := 0; ; i++ {
			if ctx.Err() != nil {
				reply.Reason = pb.StopReason_STOP_REASON_CANCELLED
				return nil
			}
			if i == int(r.GetMaxTokens()) {
				reply.Reason = pb.StopReason_STOP_REASON_MAX_TOKENS
				return nil
			}
			if i > 0 {
				// Between tokens other sessions' calls get their turns.
				sess.tape.MarkGenerated()
				if waiting, _ := srv.slot.token.contended(); waiting {
					// Another session's turn may come first: the tokens
					// the stream holds go out before it.
					flushStream(ctx)
				}
				if err := srv.yield(sess); err != nil {
					return err
				}
				if !sess.tape.HasLogits() {
					if err := sess.refreshLogits(ctx); err != nil {
						if ctx.Err() != nil {
							reply.Reason = pb.StopReason_STOP_REASON_CANCELLED
							return nil
						}
						return err
					}
				}
			}
			tok := ectx.Sample(smp)
			if tok < 0 {
				return fmt.Errorf("%w: sampler returned no token", protocol.ErrInternal)
			}
			predicted := tok
			if len(forced) > 0 {
				// Teacher forcing: the given token goes in; the sample is
				// reported as the model's prediction.
				tok = forced[i]
				if tok < 0 || int(tok) >= srv.slot.facts.VocabSize {
					return fmt.Errorf("%w: forced token %d outside the vocabulary", protocol.ErrInvalidArgument, tok)
				}
			} else if srv.slot.model.IsEOG(tok) {
				reply.Reason = pb.StopReason_STOP_REASON_END_OF_GENERATION
				return nil
			}
			piece := out.push(srv.slot.model.Piece(tok))
			ev := &pb.TokenEvent{Token: tok, Piece: piece, ElapsedUs: time.Since(start).Microseconds(), Predicted: predicted}
			if r.GetReturnLogits() {
				ev.Logits = append([]float32(nil), ectx.Logits()...)
			}
			if !r.GetNoStream() {
				if err := emit(&pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: ev}}); err != nil {
					if errors.Is(err, protocol.ErrFrameTooLarge) {
						return fmt.Errorf("%w: a token event does not fit a frame: %w", protocol.ErrResourceExhausted, err)
					}
					reply.Reason = pb.StopReason_STOP_REASON_CANCELLED
					return nil // the client is gone; the tape stays consistent
				}
			}
			reply.Tokens++
			if sess.tape.Len() >= limit {
				reply.Reason = pb.StopReason_STOP_REASON_CONTEXT_FULL
				break
			}
			// The token has been reported: it goes into the session even
			// when the call is cancelled meanwhile (one token's decode
			// bounds the delay), so the reply and the tape agree.
			if err := sess.layout.AppendTokens(context.WithoutCancel(ctx), []engine.Token{tok}); err != nil {
				if ctx.Err() != nil {
					reply.Reason = pb.StopReason_STOP_REASON_CANCELLED
					return nil
				}
				return err
			}
			if out.stop(r.GetStop()) {
				reply.Reason = pb.StopReason_STOP_REASON_STOP_STRING
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	reply.Text = out.final()
	reply.ElapsedUs = time.Since(start).Microseconds()
	return reply, nil
}

// checkSampling refuses sampling parameters no sampler can use: a
// temperature or top-p that is not a finite number, a negative
// temperature or top-k, a top-p outside [0, 1].
func checkSampling(p engine.SamplingParams) error {
	t, tp := float64(p.Temperature), float64(p.TopP)
	switch {
	case math.IsNaN(t) || math.IsInf(t, 0) || t < 0:
		return fmt.Errorf("%w: temperature %v: want a finite number >= 0", protocol.ErrInvalidArgument, p.Temperature)
	case math.IsNaN(tp) || tp < 0 || tp > 1:
		return fmt.Errorf("%w: top_p %v: want a number in [0, 1]", protocol.ErrInvalidArgument, p.TopP)
	case p.TopK < 0:
		return fmt.Errorf("%w: top_k %d: want >= 0", protocol.ErrInvalidArgument, p.TopK)
	}
	return nil
}

// ownedSession finds session id for the connection connID (0: in-process
// callers, which may use any session).
func (srv *Server) ownedSession(connID, id uint64) (*session, error) {
	srv.mu.Lock()
	sess, ok := srv.sessions[id]
	srv.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: session %d", protocol.ErrNotFound, id)
	}
	if connID != 0 && sess.connID != connID {
		return nil, fmt.Errorf("%w: session %d belongs to another connection", protocol.ErrPermissionDenied, id)
	}
	return sess, nil
}

// anySession finds session id (0: the most recently used) for any caller.
func (srv *Server) anySession(id uint64) (*session, error) {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if id == 0 {
		id = srv.lastSession
		if _, ok := srv.sessions[id]; !ok {
			// The last used session is gone: the most recently used open one.
			var best *session
			for _, s := range srv.sessions {
				if best == nil || s.lastUsed.After(best.lastUsed) {
					best = s
				}
			}
			if best == nil {
				return nil, fmt.Errorf("%w: no open session", protocol.ErrNotFound)
			}
			return best, nil
		}
	}
	sess, ok := srv.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: session %d", protocol.ErrNotFound, id)
	}
	return sess, nil
}

func (srv *Server) closeSession(ctx context.Context, connID, id uint64) error {
	sess, err := srv.ownedSession(connID, id)
	if err != nil {
		return err
	}
	return srv.dropSession(ctx, sess)
}

// dropSession frees a session's KV and removes it. It waits, until ctx
// ends, for a call in flight on the session to end (its context is
// cancelled by the caller).
func (srv *Server) dropSession(ctx context.Context, sess *session) error {
	if err := sess.lockBusy(ctx); err != nil {
		return fmt.Errorf("%w: session %d: waiting for its call to end: %w", protocol.ErrCancelled, sess.id, err)
	}
	defer sess.busy.Unlock()
	if err := srv.slot.acquire(ctx); err != nil {
		return err
	}
	defer srv.slot.release()
	if sess.closed {
		return nil
	}
	if srv.slot.model != nil {
		srv.autoSnapshot(sess, "close")
	}
	sess.closed = true
	if srv.slot.model != nil {
		// Its parked blocks stay for a later session to resume, unless it
		// was opened ephemeral ("cold"); a hot set's open tail too, taken
		// from the engine (tiers/orphantail.go).
		keep := !sess.ephemeral
		resident := keep && sess.layout.Mode() == "hot" && srv.tiers.HasArena() && sess.tape.Len() > 0 && srv.slot.makeResident(sess) == nil
		sess.layout.Release(keep, resident)
		srv.slot.forget(sess)
	}
	srv.slot.holders--
	srv.mu.Lock()
	delete(srv.sessions, sess.id)
	srv.mu.Unlock()
	srv.log.Debug("session closed", "session", sess.id)
	return nil
}
