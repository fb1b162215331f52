package resume

import (
	"context"
	"log/slog"
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
	"github.com/ctxd/ctxd/sidecar/internal/snapshot"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Session is what the owner reaches of a session. Every method is called
// under the engine token with the session resident.
type Session interface {
	// ID names the session in logs; Name is the name it was opened with
	// (its automatic snapshot's).
	ID() uint64
	Name() string
	// Tape is the session's tape, read only (the layout writes it).
	Tape() Tape
	// Layout is what the owner uses of the session's layout.
	Layout() Layout
	// Manifest is the session's last manifest; nil before one.
	Manifest() *policy.Manifest
	// Restored records what a restore brought back: the snapshot's
	// manifest (nil: it had none) and template.
	Restored(m *policy.Manifest, template string)
	// Reported records the report of the last restore or resume (explain).
	Reported(rep *pb.RestoreReport)
}

// Tape is what the owner reads of a session's tape (*layout.Tape).
type Tape interface {
	Len() int
	Tokens() []engine.Token
	Spans() []layout.Span
	// ApproxFrom is the first index whose KV is approximate, or -1.
	ApproxFrom() int
	// LogitsLost records that the engine no longer holds the last
	// token's logits (after a copy out or a restore).
	LogitsLost()
}

// Layout is what the owner uses of a session's layout.Layout: its KV
// copied out and back, cut, cleared, and the orphan tapes it could adopt.
type Layout interface {
	Mode() string
	Capture(c *snapshot.Capture, meta *snapshot.Meta) error
	Restore(ctx context.Context, r layout.Restore, upto int) error
	Cut(ctx context.Context, n int) (int, error)
	Clear() error
	Reset()
	OrphanPrefixes(target []engine.Token) []int
	AdoptOrphan(i, upto int) (tokens, blocks int, err error)
}

// Hold runs f with a session resident under the engine token; the shell
// chooses which session and how it is found, locked and accounted.
type Hold func(ctx context.Context, f func(Session) error) error

// Env is what the owner uses of the daemon.
type Env struct {
	Log   *slog.Logger
	Tiers *tiers.Tiers // its SSD tier holds the snapshots
	// Observer records the SSD-tier writes of commits (the metrics).
	Observer snapshot.WriteObserver
	// AutoKeep automatic snapshots are kept.
	AutoKeep int
	// ElemBytes is the size of one KV element (the configured KV type).
	ElemBytes int
	// Compat is the SSD tier's key prefix for the loaded model; called
	// under the engine token.
	Compat func() coldstore.Compat
	// Rates are the measured figures a restore reports: SSD-tier read and
	// decompression bytes per second, prefill tokens per second.
	Rates func() (readBPS, decompressBPS, prefillTPS float64)
	// ObserveRead updates the running estimate of the SSD tier's read
	// rate after a restore read stored bytes in d.
	ObserveRead func(stored int64, d time.Duration)
	// ClearEngine empties the engine after a session failed to clear.
	ClearEngine func()
	// Reuse is the daemon's segment-reuse mode and figures: a resume
	// brings back unchanged segments past the first change only when
	// they would be reused (nil: never).
	Reuse func() layout.ReuseSettings
}

// Owner owns the daemon's snapshots and resumes.
type Owner struct {
	env   Env
	log   *slog.Logger
	store *snapshot.Store
}

// New is the owner of the snapshots in env's SSD tier; LoadIndex reads
// their index.
func New(env Env) *Owner {
	return &Owner{env: env, log: env.Log, store: snapshot.New(env.Log, env.Tiers, env.Observer, env.AutoKeep)}
}

// LoadIndex reads every stored snapshot's tape for resume matching.
func (o *Owner) LoadIndex(ctx context.Context) { o.store.LoadIndex(ctx) }

// On reports whether snapshots can be taken: the SSD tier is open.
func (o *Owner) On() bool { return o.store.On() }

// ErrOff is the error of a snapshot call while the SSD tier is off.
func (o *Owner) ErrOff() error { return o.store.ErrOff() }

// Count is the number of indexed snapshots.
func (o *Owner) Count() int { return o.store.Count() }

// Wait waits until the automatic snapshots being written are committed
// or ctx ends.
func (o *Owner) Wait(ctx context.Context) error { return o.store.Wait(ctx) }
