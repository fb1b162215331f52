package sidecar

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
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/tiers"
)

// Snapshots are taken in two steps: capture runs under the slot token and
// only copies bytes out of the engine and the arena (snapcapture.go);
// commit runs without it and rewrites, compresses, writes and commits
// (this file). A snapshot is committed when SaveSnapshot returns; only
// then does a caller hear that it exists. Restore (snaprestore.go),
// cross-session resume (snapresume.go), automatic snapshots
// (snapauto.go) and the calls (snaprpc.go) build on the owner here.

// snapshots owns the SSD tier's snapshots: the index of their tapes that
// resume matches against, commits, and the automatic snapshots being
// written. Its methods never wait for the engine.
type snapshots struct {
	log      *slog.Logger
	tiers    *tiers.Tiers // the SSD tier holds the snapshots and their blobs
	metrics  *metrics
	autoKeep int // automatic snapshots kept (Config.AutoSnapshots)

	mu    sync.Mutex // guards index
	index map[string]*snapEntry
	wg    sync.WaitGroup // automatic snapshots being written
}

// snapEntry is what the index remembers of a stored snapshot.
type snapEntry struct {
	name    string
	created time.Time
	compat  coldstore.Compat
	mode    string
	tape    []engine.Token
}

func newSnapshots(log *slog.Logger, t *tiers.Tiers, m *metrics, autoKeep int) *snapshots {
	return &snapshots{log: log, tiers: t, metrics: m, autoKeep: autoKeep, index: map[string]*snapEntry{}}
}

// on reports whether snapshots can be taken: the SSD tier is open.
func (s *snapshots) on() bool { return s.tiers.SSD() != nil }

// errOff is the error of a snapshot call while the SSD tier is off.
func (s *snapshots) errOff() error {
	return fmt.Errorf("%w: %w", protocol.ErrResourceExhausted, s.tiers.ErrSSDOff())
}

// count is the number of indexed snapshots.
func (s *snapshots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index)
}

// loadIndex reads every stored snapshot's tape for resume matching.
func (s *snapshots) loadIndex(ctx context.Context) {
	ssd := s.tiers.SSD()
	if ssd == nil {
		return
	}
	infos, err := ssd.Snapshots(ctx)
	if err != nil {
		s.log.Warn("SSD tier: listing snapshots", "err", err)
		return
	}
	idx := map[string]*snapEntry{}
	for _, in := range infos {
		e := &snapEntry{name: in.Name, created: in.Created, compat: in.Compat}
		if snap, err := ssd.LoadSnapshot(ctx, in.Name); err == nil {
			var meta snapMeta
			if json.Unmarshal(snap.Meta, &meta) == nil && meta.Format == snapFormat {
				e.mode = meta.Mode
				e.tape, _ = decodeTape(meta.Tape)
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

// commit stores a capture's new blobs and commits the snapshot. Hashing,
// the token-major rewrite and compression happen here, after the engine
// is released; blobs the store already holds are not written again.
func (s *snapshots) commit(ctx context.Context, c *snapCapture) (*pb.SnapshotReply, error) {
	ssd := s.tiers.SSD()
	start := time.Now()
	before := ssd.Stats().WrittenBytes
	newBlocks := 0
	for _, p := range c.pending {
		key := tiers.ContentKey(c.snap.Compat, p.meta.Chain, p.meta.Pos0, p.parts...)
		c.snap.Blocks[p.idx].Key = key
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
	if err := ssd.SaveSnapshot(ctx, c.snap); err != nil {
		if errors.Is(err, coldstore.ErrMissingBlock) {
			// Blocks that failed to write, or that the quota collected
			// before the snapshot could claim them.
			st := ssd.Stats()
			cause := st.Unavailable
			if cause == "" {
				cause = fmt.Sprintf("the quota of %d bytes cannot hold this snapshot's %d raw bytes", st.QuotaBytes, c.raw)
			}
			return nil, fmt.Errorf("%w: snapshot %s not saved: %s (%w)", protocol.ErrResourceExhausted, c.snap.Name, cause, err)
		}
		return nil, tiers.WireErr(err)
	}
	written := ssd.Stats().WrittenBytes - before
	s.metrics.ObserveColdWrite(int(written), time.Since(start))
	s.mu.Lock()
	s.index[c.snap.Name] = &snapEntry{name: c.snap.Name, created: c.snap.Created, compat: c.snap.Compat, mode: c.mode, tape: c.tape}
	s.mu.Unlock()
	return &pb.SnapshotReply{
		Name: c.snap.Name, Tokens: int64(len(c.tape)), Blocks: int32(len(c.snap.Blocks)), NewBlocks: int32(newBlocks),
		RawBytes: c.raw, CompressedBytes: written, ElapsedUs: time.Since(start).Microseconds(),
	}, nil
}

// load reads snapshot name and checks it was saved for want (the loaded
// model's SSD key prefix; modelLoaded false: no model).
func (s *snapshots) load(ctx context.Context, name string, want coldstore.Compat, modelLoaded bool) (coldstore.Snapshot, snapMeta, error) {
	var meta snapMeta
	snap, err := s.tiers.SSD().LoadSnapshot(ctx, name)
	if err != nil {
		return snap, meta, tiers.WireErr(err)
	}
	if err := json.Unmarshal(snap.Meta, &meta); err != nil || meta.Format != snapFormat {
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

// candidates are the indexed snapshots of compat and mode a session could
// resume from, by name (so equal candidates are met in a stable order).
func (s *snapshots) candidates(compat coldstore.Compat, mode string) []*snapEntry {
	var out []*snapEntry
	s.mu.Lock()
	for _, e := range s.index {
		if e.compat == compat && e.mode == mode {
			out = append(out, e)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *snapEntry) int { return strings.Compare(a.name, b.name) })
	return out
}

// entry is the index's entry for name, or nil.
func (s *snapshots) entry(name string) *snapEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.index[name]
}

// delete removes snapshot name from the SSD tier and the index.
func (s *snapshots) delete(ctx context.Context, name string) error {
	if err := s.tiers.SSD().DeleteSnapshot(ctx, name); err != nil {
		return tiers.WireErr(err)
	}
	s.mu.Lock()
	delete(s.index, name)
	s.mu.Unlock()
	return nil
}

// pruneAuto keeps the newest autoKeep automatic snapshots.
func (s *snapshots) pruneAuto(ctx context.Context) {
	s.mu.Lock()
	var autos []*snapEntry
	for _, e := range s.index {
		if strings.HasPrefix(e.name, autoPrefix) {
			autos = append(autos, e)
		}
	}
	s.mu.Unlock()
	if len(autos) <= s.autoKeep {
		return
	}
	sort.Slice(autos, func(i, j int) bool { return autos[i].created.After(autos[j].created) })
	for _, e := range autos[s.autoKeep:] {
		if err := s.delete(ctx, e.name); err != nil {
			s.log.Warn("pruning automatic snapshot", "name", e.name, "err", err)
		}
	}
}

// wait waits until the automatic snapshots being written are committed
// or ctx ends.
func (s *snapshots) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
