package sidecar

import (
	"context"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// A session's layout is how its tape sits in the engine. There are two,
// chosen once when the session opens (by whether the loaded model runs a
// hot set) and never mixed:
//
//   - denseLayout (dense.go): token i of the tape at position i;
//   - hotSet (hot.go): the tape cut into blocks, a bounded set of them in
//     the engine below the trained window, the rest parked in the tiers.
//
// Everything that differs between the two is one method here; the code
// around them (calls, invalidation, snapshots, resume) never asks which
// layout it has. Every method runs under the slot token with the session
// resident, and leaves the tape and the KV equal to each other, on
// failure too.
type layout interface {
	// mode names the layout in snapshots: "dense" or "hot".
	mode() string
	// maxTokens is the most tokens the session may hold.
	maxTokens() int
	// sync makes the tape equal target (tokens and spans), keeping the
	// longest reusable prefix and prefilling the rest. With needLogits the
	// last token's logits are left in the engine (recomputing one token
	// if all was reused); with keepTail a tape that already extends
	// target is left as is; with retrieve a hot set brings back parked
	// blocks the new tokens ask for.
	sync(ctx context.Context, target prompt, needLogits, keepTail, retrieve bool) (syncResult, error)
	// appendTokens decodes toks after the tape.
	appendTokens(ctx context.Context, toks []engine.Token) error
	// cut drops the tape and its KV from tape index n on (a hot set keeps
	// less: up to the start of the block n falls in) and returns the
	// length kept.
	cut(n int) (int, error)
	// clear empties the session in the engine and the tiers.
	clear() error
	// reset forgets the session's state without touching the engine (the
	// caller cleared it), after clear failed.
	reset()
	// release frees what the session keeps below the engine as it closes;
	// with keep, a hot set's parked blocks stay as an orphan tape for a
	// later session to resume.
	release(keep bool)
	// explain fills the layout's figures and returns the tape ranges that
	// are in the engine.
	explain(rep *pb.ExplainReply) [][2]int
	// orphanPrefixes are, per orphan tape a hot set could adopt (oldest
	// first), the tokens it shares with target; nil for a dense session.
	orphanPrefixes(target []engine.Token) []int
	// adoptOrphan makes the first upto tokens of orphan tape i the empty
	// session's tape and returns the tokens and blocks it holds then.
	adoptOrphan(i, upto int) (tokens, blocks int, err error)
	// capture copies the session's KV out for a snapshot (snapcapture.go).
	capture(c *snapshot.Capture, meta *snapshot.Meta) error
	// restore rebuilds the session from a snapshot (snaprestore.go),
	// bringing back at least the first upto tokens.
	restore(ctx context.Context, r snapRestore, upto int) error
}

// layoutEnv is what a layout uses of the daemon: the loaded model's
// engine and settings, fixed while any session is open.
type layoutEnv struct {
	ectx            engine.Context
	tiers           *tiers.Tiers
	metrics         *metrics
	hot             *hotConfig // the slot's: the scorers may change between turns
	fig             *figures   // restore-or-recompute figures, refined by restores
	contextTokens   int        // KV cells a session may fill
	kvBytesPerToken int64      // the loaded model's, for the KV type
	sessionTokens   func() int // the most tokens a session may hold
	newBlockID      func() uint64
	yield           func(*session) error // other sessions' turns between chunks (turns.go)
	contended       func() bool          // whether others wait for the engine
	ssdCompat       coldstore.Compat
}

// layoutEnv describes the loaded model to a new session's layout; the
// caller holds the slot token.
func (srv *Server) layoutEnv() *layoutEnv {
	s := srv.slot
	return &layoutEnv{
		ectx: s.ectx, tiers: srv.tiers, metrics: srv.metrics, hot: &s.hot, fig: &s.fig,
		contextTokens: s.contextTokens(), kvBytesPerToken: s.facts.KVBytesPerToken(srv.cfg.KVType), sessionTokens: s.sessionTokens, newBlockID: s.newBlockID,
		yield:     srv.yield,
		contended: func() bool { waiting, _ := s.token.contended(); return waiting },
		ssdCompat: srv.ssdCompat(),
	}
}

// newLayout is the layout a session opened on the loaded model gets.
func (srv *Server) newLayout(sess *session) layout {
	env := srv.layoutEnv()
	if srv.slot.hot.budget > 0 {
		return newHotSet(env, sess)
	}
	return &denseLayout{env: env, sess: sess}
}
