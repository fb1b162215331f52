package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Store owns the SSD tier's snapshots: the index of their tapes that
// resume matches against, commits, and the automatic snapshots being
// written. Its methods never wait for the engine.
type Store struct {
	log      *slog.Logger
	tiers    *tiers.Tiers // the SSD tier holds the snapshots and their blobs
	obs      WriteObserver
	autoKeep int // automatic snapshots kept

	mu    sync.Mutex // guards index
	index map[string]*Entry
	wg    sync.WaitGroup // automatic snapshots being written
}

// WriteObserver records the SSD-tier writes of commits (the daemon's
// metrics).
type WriteObserver interface {
	ObserveColdWrite(n int, d time.Duration)
}

// Entry is what the index remembers of a stored snapshot.
type Entry struct {
	Name    string
	Created time.Time
	Compat  coldstore.Compat
	Mode    string
	Tape    []engine.Token
	// Spans are the tape's segment ranges: a resume past the first change
	// matches the target's segments against them.
	Spans []policy.SpanRange
}

// spanRanges are spans as policy's ranges.
func spanRanges(spans []Span) []policy.SpanRange {
	out := make([]policy.SpanRange, len(spans))
	for i, sp := range spans {
		out[i] = policy.SpanRange{Start: sp.Start, End: sp.End}
	}
	return out
}

// New returns the owner of the snapshots in t's SSD tier, keeping the
// newest autoKeep automatic ones; LoadIndex fills its index.
func New(log *slog.Logger, t *tiers.Tiers, obs WriteObserver, autoKeep int) *Store {
	return &Store{log: log, tiers: t, obs: obs, autoKeep: autoKeep, index: map[string]*Entry{}}
}

// On reports whether snapshots can be taken: the SSD tier is open.
func (s *Store) On() bool { return s.tiers.SSD() != nil }

// ErrOff is the error of a snapshot call while the SSD tier is off.
func (s *Store) ErrOff() error {
	return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, s.tiers.ErrSSDOff())
}

// Count is the number of indexed snapshots.
func (s *Store) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index)
}

// LoadIndex reads every stored snapshot's tape for resume matching.
func (s *Store) LoadIndex(ctx context.Context) {
	ssd := s.tiers.SSD()
	if ssd == nil {
		return
	}
	infos, err := ssd.Snapshots(ctx)
	if err != nil {
		s.log.Warn("SSD tier: listing snapshots", "err", err)
		return
	}
	idx := map[string]*Entry{}
	for _, in := range infos {
		e := &Entry{Name: in.Name, Created: in.Created, Compat: in.Compat}
		if snap, err := ssd.LoadSnapshot(ctx, in.Name); err == nil {
			var meta Meta
			if json.Unmarshal(snap.Meta, &meta) == nil && meta.Format == Format {
				e.Mode = meta.Mode
				e.Tape, _ = DecodeTape(meta.Tape)
				e.Spans = spanRanges(meta.Spans)
			}
		} else {
			s.log.Warn("SSD tier: snapshot skipped", "name", in.Name, "err", err)
			continue
		}
		idx[in.Name] = e
	}
	s.mu.Lock()
	s.index = idx
	s.mu.Unlock()
}

// Commit stores a capture's new blobs and commits the snapshot. Hashing,
// the token-major rewrite and compression happen here, after the engine
// is released; blobs the store already holds are not written again.
func (s *Store) Commit(ctx context.Context, c *Capture) (*pb.SnapshotReply, error) {
	ssd := s.tiers.SSD()
	start := time.Now()
	before := ssd.Stats().WrittenBytes
	newBlocks := 0
	for _, p := range c.pending {
		key := tiers.ContentKey(c.Snap.Compat, p.meta.Chain, p.meta.Pos0, p.parts...)
		c.Snap.Blocks[p.idx].Key = key
		wrote, err := s.tiers.Store(ctx, key, p.meta, p.parts, false)
		if err != nil {
			return nil, tiers.WireErr(err)
		}
		if wrote {
			newBlocks++
		}
	}
	if err := ssd.Flush(ctx); err != nil {
		return nil, tiers.WireErr(err)
	}
	if err := ssd.SaveSnapshot(ctx, c.Snap); err != nil {
		if errors.Is(err, coldstore.ErrMissingBlock) {
			// Blocks that failed to write, or that the quota collected
			// before the snapshot could claim them.
			st := ssd.Stats()
			cause := st.Unavailable
			if cause == "" {
				cause = fmt.Sprintf("the quota of %d bytes cannot hold this snapshot's %d raw bytes", st.QuotaBytes, c.Raw)
			}
			return nil, fmt.Errorf("%w: snapshot %s not saved: %s (%w)", protocol.ErrResourceExhausted, c.Snap.Name, cause, err)
		}
		return nil, tiers.WireErr(err)
	}
	written := ssd.Stats().WrittenBytes - before
	s.obs.ObserveColdWrite(int(written), time.Since(start))
	s.mu.Lock()
	s.index[c.Snap.Name] = &Entry{Name: c.Snap.Name, Created: c.Snap.Created, Compat: c.Snap.Compat, Mode: c.Mode, Tape: c.Tape, Spans: spanRanges(c.Spans)}
	s.mu.Unlock()
	return &pb.SnapshotReply{
		Name: c.Snap.Name, Tokens: int64(len(c.Tape)), Blocks: int32(len(c.Snap.Blocks)), NewBlocks: int32(newBlocks),
		RawBytes: c.Raw, CompressedBytes: written, ElapsedUs: time.Since(start).Microseconds(),
	}, nil
}

// Load reads snapshot name and checks it was saved for want (the loaded
// model's SSD key prefix; modelLoaded false: no model).
func (s *Store) Load(ctx context.Context, name string, want coldstore.Compat, modelLoaded bool) (coldstore.Snapshot, Meta, error) {
	var meta Meta
	snap, err := s.tiers.SSD().LoadSnapshot(ctx, name)
	if err != nil {
		return snap, meta, tiers.WireErr(err)
	}
	if err := json.Unmarshal(snap.Meta, &meta); err != nil || meta.Format != Format {
		return snap, meta, fmt.Errorf("%w: snapshot %s has unreadable metadata (format %d): %v", protocol.ErrIncompatible, name, meta.Format, err)
	}
	if !modelLoaded {
		return snap, meta, protocol.ErrNoModel
	}
	if snap.Compat != want {
		return snap, meta, fmt.Errorf("%w: snapshot %s was saved for model %.12s with KV %s (flash attention %v, %s); loaded: model %.12s, KV %s (flash attention %v, %s)",
			protocol.ErrIncompatible, name, snap.Compat.ModelDigest, snap.Compat.KVType, snap.Compat.FlashAttention, snap.Compat.Settings,
			want.ModelDigest, want.KVType, want.FlashAttention, want.Settings)
	}
	return snap, meta, nil
}

// Candidates are the indexed snapshots of compat and mode a session could
// resume from, by name (so equal candidates are met in a stable order).
func (s *Store) Candidates(compat coldstore.Compat, mode string) []*Entry {
	var out []*Entry
	s.mu.Lock()
	for _, e := range s.index {
		if e.Compat == compat && e.Mode == mode {
			out = append(out, e)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Entry is the index's entry for name, or nil.
func (s *Store) Entry(name string) *Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index[name]
}

// Delete removes snapshot name from the SSD tier and the index.
func (s *Store) Delete(ctx context.Context, name string) error {
	if err := s.tiers.SSD().DeleteSnapshot(ctx, name); err != nil {
		return tiers.WireErr(err)
	}
	s.mu.Lock()
	delete(s.index, name)
	s.mu.Unlock()
	return nil
}

// PruneAuto keeps the newest autoKeep automatic snapshots.
func (s *Store) PruneAuto(ctx context.Context) {
	s.mu.Lock()
	var autos []*Entry
	for _, e := range s.index {
		if strings.HasPrefix(e.Name, AutoPrefix) {
			autos = append(autos, e)
		}
	}
	s.mu.Unlock()
	if len(autos) <= s.autoKeep {
		return
	}
	sort.Slice(autos, func(i, j int) bool { return autos[i].Created.After(autos[j].Created) })
	for _, e := range autos[s.autoKeep:] {
		if err := s.Delete(ctx, e.Name); err != nil {
			s.log.Warn("pruning automatic snapshot", "name", e.Name, "err", err)
		}
	}
}

// Wait waits until the automatic snapshots being written are committed
// or ctx ends.
func (s *Store) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AutoPrefix starts every automatic snapshot's name.
const AutoPrefix = "auto-"

// CommitInBackground commits an automatic snapshot's capture without
// making anyone wait (within a bound of its own), then prunes the oldest
// automatic snapshots; Wait waits for it. why says what took it.
func (s *Store) CommitInBackground(c *Capture, why string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		rep, err := s.Commit(ctx, c)
		if err != nil {
			s.log.Warn("automatic snapshot failed; the session's state stays in memory only", "name", c.Snap.Name, "why", why, "err", err)
			return
		}
		s.log.Info("automatic snapshot", "name", rep.Name, "why", why, "tokens", rep.Tokens, "new_blocks", rep.NewBlocks, "ms", rep.ElapsedUs/1000)
		s.PruneAuto(ctx)
	}()
}
