package coldstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"
)

// Snapshot is a named, saved session: its compat settings, the caller's
// manifest and metadata (opaque here) and its blocks in tape order.
type Snapshot struct {
	Name     string // [A-Za-z0-9._-]{1,128}; else ErrInvalidName
	Created  time.Time
	Compat   Compat
	Manifest []byte          // opaque to coldstore
	Meta     []byte          // opaque session metadata
	Blocks   []SnapshotBlock // in tape order
}

// SnapshotBlock is one block of a snapshot and its token count.
type SnapshotBlock struct {
	Key    Key
	Tokens int
}

// SnapshotInfo summarises a snapshot without reading it.
type SnapshotInfo struct {
	Name    string
	Created time.Time
	Tokens  int   // sum of the blocks' token counts
	Blocks  int   // number of blocks
	Bytes   int64 // file bytes of its blocks that are stored (a block named twice counts once)
	Compat  Compat
}

// maxSnapshotBlocks bounds the blocks of one snapshot.
const maxSnapshotBlocks = 1 << 24

// validName accepts [A-Za-z0-9._-]{1,128}, except "." and "..".
func validName(name string) error {
	if len(name) == 0 || len(name) > 128 || name == "." || name == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q (allowed: A-Z a-z 0-9 . _ -)", ErrInvalidName, name)
		}
	}
	return nil
}

// addSnapLocked indexes a snapshot and takes its block references.
func (s *Store) addSnapLocked(se *snapEntry) {
	s.snaps[se.name] = se
	s.bytes += se.size
	s.pinLocked(se.blocks)
}

// dropSnapLocked removes a snapshot from the index and releases its
// block references.
func (s *Store) dropSnapLocked(se *snapEntry) {
	if s.snaps[se.name] != se {
		return
	}
	delete(s.snaps, se.name)
	s.bytes -= se.size
	s.unpinLocked(se.blocks)
}

func (s *Store) pinLocked(keys []Key) {
	for _, k := range keys {
		s.refs[k]++
	}
}

func (s *Store) unpinLocked(keys []Key) {
	for _, k := range keys {
		if s.refs[k] <= 1 {
			delete(s.refs, k)
		} else {
			s.refs[k]--
		}
	}
}

// missingLocked lists the keys (once each, in order) that are not stored.
func (s *Store) missingLocked(keys []Key) []Key {
	var missing []Key
	seen := make(map[Key]bool)
	for _, k := range keys {
		if _, ok := s.blocks[k]; !ok && !seen[k] {
			seen[k] = true
			missing = append(missing, k)
		}
	}
	return missing
}

func missingErr(name string, total int, missing []Key) error {
	return fmt.Errorf("%w: snapshot %q: %d of its %d blocks are not stored (first %s)", ErrMissingBlock, name, len(missing), total, missing[0])
}

func missingProblem(path string, se *snapEntry, missing []Key) Problem {
	return Problem{Path: path, Kind: KindMissingBlock, Err: missingErr(se.name, len(se.blocks), missing)}
}

// SaveSnapshot writes snap atomically (temporary file, fsync, rename,
// folder fsync), replacing a snapshot of the same name in one step. Every
// block must already be stored (Put, or Enqueue then Flush), else
// ErrMissingBlock and nothing is written. From the moment it is called,
// the blocks are referenced and GC spares them. A zero Created is set to
// the current time. While the store stands aside it returns a wrapped
// ErrUnavailable.
func (s *Store) SaveSnapshot(ctx context.Context, snap Snapshot) error {
	if err := validName(snap.Name); err != nil {
		return err
	}
	if len(snap.Blocks) > maxSnapshotBlocks {
		return fmt.Errorf("%w: %d blocks (at most %d)", ErrInvalidArgument, len(snap.Blocks), maxSnapshotBlocks)
	}
	keys := make([]Key, len(snap.Blocks))
	for i, b := range snap.Blocks {
		if b.Tokens < 0 || b.Tokens > maxTokens {
			return fmt.Errorf("%w: block %d has %d tokens", ErrInvalidArgument, i, b.Tokens)
		}
		keys[i] = b.Key
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if snap.Created.IsZero() {
		snap.Created = time.Now()
	}
	s.mu.Lock()
	if err := s.writeGateLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	if missing := s.missingLocked(keys); len(missing) > 0 {
		s.mu.Unlock()
		return missingErr(snap.Name, len(keys), missing)
	}
	s.pinLocked(keys) // GC must not take them while the file is written
	s.mu.Unlock()

	header, payload := encodeSnapshot(snap)
	prefix := encodePrefix(snapMagic, header, payload)
	n, err := writeAtomic(s.ops.Load(), s.snapsDir, snap.Name+snapExt, prefix, payload)
	err = s.noteWriteResult("write snapshot "+snap.Name, err)

	s.mu.Lock()
	if err != nil {
		s.unpinLocked(keys)
		s.mu.Unlock()
		return err
	}
	s.writtenBytes.Add(n)
	se := &snapEntry{name: snap.Name, created: snap.Created.UTC(), compat: snap.Compat, blocks: keys, size: n}
	for _, b := range snap.Blocks {
		se.tokens += b.Tokens
	}
	if old := s.snaps[snap.Name]; old != nil {
		s.dropSnapLocked(old)
	}
	s.snaps[se.name] = se // references already taken
	s.bytes += se.size
	over := s.cfg.QuotaBytes > 0 && s.bytes > s.cfg.QuotaBytes
	s.mu.Unlock()
	if over {
		if _, _, err := s.GC(ctx); err != nil {
			s.log.Warn("gc after snapshot", "err", err)
		}
	}
	return nil
}

// LoadSnapshot reads the snapshot name, checks its file (CRCs, framing,
// name) and that every block it names is stored and its file exists. A
// corrupt file is moved to quarantine/ and ErrCorrupt returned. When
// blocks are missing it returns the snapshot together with an
// ErrMissingBlock (the caller may use the blocks before the first missing
// one).
func (s *Store) LoadSnapshot(ctx context.Context, name string) (Snapshot, error) {
	if err := validName(name); err != nil {
		return Snapshot{}, err
	}
	if err := ctx.Err(); err != nil {
		return Snapshot{}, err
	}
	if err := s.enter(); err != nil {
		return Snapshot{}, err
	}
	defer s.leave()
	s.mu.Lock()
	se := s.snaps[name]
	s.mu.Unlock()
	if se == nil {
		return Snapshot{}, fmt.Errorf("%w: snapshot %q", ErrNotFound, name)
	}
	path := s.snapPath(name)
	_, snap, err := readSnapshotFile(path, name, true)
	if err != nil {
		var fe *fileError
		if errors.As(err, &fe) {
			p := s.snapProblem(se, path, fe)
			return Snapshot{}, fmt.Errorf("snapshot %q: %w", name, p.Err)
		}
		return Snapshot{}, err
	}
	keys := make([]Key, len(snap.Blocks))
	for i, b := range snap.Blocks {
		keys[i] = b.Key
	}
	s.mu.Lock()
	missing := s.missingLocked(keys)
	s.mu.Unlock()
	if len(missing) == 0 {
		seen := make(map[Key]bool, len(keys))
		for _, k := range keys {
			if seen[k] {
				continue
			}
			seen[k] = true
			if _, err := os.Stat(s.blockPath(k)); err != nil {
				missing = append(missing, k)
			}
		}
	}
	if len(missing) > 0 {
		return snap, missingErr(name, len(keys), missing)
	}
	return snap, nil
}

// snapProblem handles a snapshot file that failed a check, like
// blockProblem: drop from the index, set aside unless missing or an I/O
// error.
func (s *Store) snapProblem(se *snapEntry, path string, fe *fileError) Problem {
	p := Problem{Path: path, Kind: fe.kind, Err: fe.err}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fe.kind == KindIO || s.snaps[se.name] != se {
		return p
	}
	s.dropSnapLocked(se)
	if fe.kind == KindMissing {
		return p
	}
	p.MovedTo = s.quarantineLocked(path, fe.kind)
	s.log.Warn("snapshot set aside", "path", path, "kind", fe.kind, "err", fe.err, "moved_to", p.MovedTo)
	return p
}

// Snapshots lists the stored snapshots, oldest first (then by name).
func (s *Store) Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]SnapshotInfo, 0, len(s.snaps))
	for _, se := range s.snaps {
		info := SnapshotInfo{Name: se.name, Created: se.created, Tokens: se.tokens, Blocks: len(se.blocks), Compat: se.compat}
		seen := make(map[Key]bool, len(se.blocks))
		for _, k := range se.blocks {
			if e, ok := s.blocks[k]; ok && !seen[k] {
				seen[k] = true
				info.Bytes += e.size
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].Created.Equal(out[b].Created) {
			return out[a].Created.Before(out[b].Created)
		}
		return out[a].Name < out[b].Name
	})
	return out, nil
}

// DeleteSnapshot removes the snapshot name (not its blocks; they become
// collectable once no snapshot references them). Unknown: ErrNotFound.
func (s *Store) DeleteSnapshot(ctx context.Context, name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.enter(); err != nil {
		return err
	}
	defer s.leave()
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.snaps[name]
	if se == nil {
		return fmt.Errorf("%w: snapshot %q", ErrNotFound, name)
	}
	if err := os.Remove(s.snapPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("coldstore: delete snapshot %q: %w", name, err)
	}
	syncDir(s.snapsDir) // best effort: a resurrected snapshot after power loss is still valid
	s.dropSnapLocked(se)
	s.spaceFreedLocked(se.size)
	return nil
}
