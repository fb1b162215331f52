package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Requests to sessions. HTTP requests are one-shots; the door keeps a
// table of live ctxd sessions and sends each request to one of them, as
// policy.ChooseSession decides:
//
//  1. The affinity key: header x-session-id, X-Claude-Code-Session-Id,
//     x-session-affinity, else the body's prompt_cache_key,
//     metadata.user_id's session id (Anthropic), user. Only sessions with
//     the same key (or, without one, sessions without a key) are
//     candidates.
//  2. The family: the agent's own text of the request's first message
//     (its system prompt) must share at least half of the shorter one's
//     with the candidate's. A side request (a memory extractor, a title
//     generator) has another system prompt, so it gets a session of its
//     own and the main conversation's KV stays where it is.
//  3. A busy session is waited for only when the request continues all
//     it holds; otherwise the request opens its own.
//  4. Among the candidates, the longest common prefix of rendered segment
//     text wins (ties: the most recently used); none: a new session.
//
// An identical retried body lands on the same session and reuses all of
// it. A session runs one request at a time. The table holds at most
// MaxSessions; opening one more closes an idle session chosen by
// policy.EvictSession (side sessions before the main session of a key,
// least recently used first; the daemon snapshots it on close, so its KV
// resumes later from the SSD tier or the arena).

type liveSession struct {
	id            uint64 // the daemon's session id
	key           string
	family        string   // the agent's own text of its conversation (policy.SessionRequest.Family)
	segs          []string // rendered text of the last request's segments
	contextTokens int      // the session's token limit
	lastUsed      time.Time
	lock          chan struct{} // one request at a time
	users         int           // requests holding or waiting for lock (guarded by the table)
	closed        bool
}

type sessionTable struct {
	srv  *Server
	mu   sync.Mutex
	live []*liveSession
	// opening counts sessions being opened: with live they never pass
	// MaxSessions, however many requests arrive at once.
	opening int
	// released is closed (and replaced) whenever a request releases a
	// session: a request that found every session busy in a full table
	// waits for it.
	released chan struct{}
}

func newSessionTable(s *Server) *sessionTable {
	return &sessionTable{srv: s, released: make(chan struct{})}
}

// sessionKey is the request's affinity key.
func sessionKey(h http.Header, promptCacheKey, user string) string {
	for _, k := range []string{h.Get("X-Session-Id"), h.Get("X-Claude-Code-Session-Id"), h.Get("X-Session-Affinity"), promptCacheKey, user} {
		if k != "" {
			return k
		}
	}
	return ""
}

func segmentTexts(m policy.Manifest) []string {
	out := make([]string, len(m.Segments))
	for i, seg := range m.Segments {
		out[i] = seg.Text
	}
	return out
}

// sessionName labels a daemon session: its key and a tag of its first
// segment, so a conversation and its side requests keep automatic
// snapshots ("auto-NAME") of their own.
func sessionName(key string, segs []string) string {
	first := ""
	if len(segs) > 0 {
		first = segs[0]
	}
	h := sha256.Sum256([]byte(first))
	name := "http-" + hex.EncodeToString(h[:4])
	if key != "" {
		name += "-" + key
	}
	return name[:min(len(name), 200)]
}

// acquire finds or opens the session for a request and locks it; release
// must follow. It returns how the session was chosen, for logs and the
// X-Ctxd-Session header.
func (t *sessionTable) acquire(ctx context.Context, key, family string, m policy.Manifest) (*liveSession, string, error) {
	segs := segmentTexts(m)
	t.mu.Lock()
	cands := make([]policy.SessionCandidate, len(t.live))
	for i, ls := range t.live {
		cands[i] = policy.SessionCandidate{Key: ls.key, Family: ls.family, Segments: ls.segs, Busy: ls.users > 0, LastUsed: ls.lastUsed.UnixNano()}
	}
	choice := policy.ChooseSession(policy.SessionRequest{Key: key, Family: family, Segments: segs}, cands)
	var best *liveSession
	if choice.Index >= 0 {
		best = t.live[choice.Index]
		best.users++
	}
	t.mu.Unlock()
	if best == nil {
		ls, err := t.open(ctx, key, family, segs) // counts this request as a user
		if err != nil {
			return nil, "", err
		}
		best = ls
	}
	select {
	case best.lock <- struct{}{}:
	case <-ctx.Done():
		t.mu.Lock()
		best.users--
		t.mu.Unlock()
		return nil, "", fmt.Errorf("%w: waiting for the session's previous request: %w", protocol.ErrCancelled, ctx.Err())
	}
	t.mu.Lock()
	closed := best.closed
	t.mu.Unlock()
	if closed { // closed while we waited: start over
		t.release(best, nil)
		return t.acquire(ctx, key, family, m)
	}
	return best, choice.How, nil
}

// release unlocks a session; segs, when set, is what it now holds.
func (t *sessionTable) release(ls *liveSession, segs []string) {
	t.mu.Lock()
	if segs != nil {
		ls.segs = segs
	}
	ls.lastUsed = time.Now()
	ls.users--
	close(t.released)
	t.released = make(chan struct{})
	t.mu.Unlock()
	<-ls.lock
}

// open opens a daemon session, closing the least recently used idle one
// first when the table is full; when every session of a full table is
// busy it waits until one is released (or ctx ends): the table never
// holds more than MaxSessions.
func (t *sessionTable) open(ctx context.Context, key, family string, segs []string) (*liveSession, error) {
	if err := t.reserve(ctx); err != nil {
		return nil, err
	}
	name := sessionName(key, segs)
	resp := t.srv.backend.Handle(ctx, t.srv.connID, &pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{Name: name}}}, nil)
	if resp.GetError() != nil {
		t.mu.Lock()
		t.opening--
		t.mu.Unlock()
		err := protocol.FromWire(resp.GetError())
		t.srv.noteError(err)
		return nil, err
	}
	r := resp.GetOpenSession()
	ls := &liveSession{id: r.GetSessionId(), key: key, family: family, segs: segs, contextTokens: int(r.GetContextTokens()), lastUsed: time.Now(), lock: make(chan struct{}, 1), users: 1}
	t.mu.Lock()
	t.opening--
	t.live = append(t.live, ls)
	t.mu.Unlock()
	t.srv.log.Debug("session opened", "session", ls.id, "key", key, "live", len(t.live))
	return ls, nil
}

// reserve takes a place in the table for a session about to be opened,
// closing idle sessions (policy.EvictSession chooses) while the table is
// full, and waiting for a release while every session is busy.
func (t *sessionTable) reserve(ctx context.Context) error {
	for {
		t.mu.Lock()
		if len(t.live)+t.opening < t.srv.cfg.MaxSessions {
			t.opening++
			t.mu.Unlock()
			return nil
		}
		cands := make([]policy.SessionCandidate, len(t.live))
		for i, ls := range t.live {
			cands[i] = policy.SessionCandidate{Key: ls.key, Segments: ls.segs, Busy: ls.users > 0, LastUsed: ls.lastUsed.UnixNano()}
		}
		if i := policy.EvictSession(cands); i >= 0 {
			lru := t.live[i]
			t.removeLocked(lru)
			t.mu.Unlock()
			t.srv.log.Info("HTTP session closed (least recently used)", "session", lru.id, "key", lru.key, "cap", t.srv.cfg.MaxSessions)
			t.closeSession(ctx, lru)
			continue
		}
		released := t.released
		t.mu.Unlock()
		select {
		case <-released:
		case <-ctx.Done():
			return fmt.Errorf("%w: all %d HTTP sessions are busy (--http-sessions) and the request ended while waiting for one: %w",
				protocol.ErrSessionBusy, t.srv.cfg.MaxSessions, ctx.Err())
		}
	}
}

func (t *sessionTable) removeLocked(ls *liveSession) {
	ls.closed = true
	for i, x := range t.live {
		if x == ls {
			t.live = append(t.live[:i], t.live[i+1:]...)
			break
		}
	}
}

func (t *sessionTable) closeSession(ctx context.Context, ls *liveSession) {
	resp := t.srv.backend.Handle(context.WithoutCancel(ctx), t.srv.connID, &pb.Request{Body: &pb.Request_CloseSession{CloseSession: &pb.CloseSessionRequest{SessionId: ls.id}}}, nil)
	if e := resp.GetError(); e != nil {
		t.srv.log.Debug("closing an HTTP session", "session", ls.id, "err", protocol.FromWire(e))
	}
}

// drop forgets a session the daemon no longer knows (it failed in a way
// that leaves it unusable), closing it there too.
func (t *sessionTable) drop(ctx context.Context, ls *liveSession) {
	t.mu.Lock()
	t.removeLocked(ls)
	t.mu.Unlock()
	t.closeSession(ctx, ls)
}

// closeAll closes every session (shutdown).
func (t *sessionTable) closeAll(ctx context.Context) {
	t.mu.Lock()
	all := t.live
	t.live = nil
	for _, ls := range all {
		ls.closed = true
	}
	t.mu.Unlock()
	for _, ls := range all {
		t.closeSession(ctx, ls)
	}
}

// snapshot lists the live sessions for /api/ps and tests.
func (t *sessionTable) snapshot() []liveSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]liveSession, len(t.live))
	for i, ls := range t.live {
		out[i] = liveSession{id: ls.id, key: ls.key, contextTokens: ls.contextTokens, lastUsed: ls.lastUsed, users: ls.users}
	}
	return out
}

// familyText is the agent's own text that names a conversation's family
// (policy.SessionRequest.Family): its first message's content, the system
// prompt when there is one; never text of the chat template.
func familyText(msgs []chat.Message) string {
	if len(msgs) == 0 {
		return ""
	}
	return msgs[0].Content
}
