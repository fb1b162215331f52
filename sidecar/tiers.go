package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/shm"
)

// The block tiers: where a sealed block's KV is kept below the engine.
// The host-RAM arena (package shm) belongs to the loaded model; the SSD
// tier (package coldstore) holds compressed blocks and snapshots and is
// opened once per Server (keys carry the model digest and the KV
// settings, so one store serves every model). When the SSD tier cannot be
// opened, or later stands aside after ENOSPC/EIO, sessions keep running
// on host RAM and the reason is reported in Status/Explain.
//
// tiers is their one owner: the hot set parks, fetches, spills and drops
// blocks through it and never reaches shm or coldstore itself, and every
// fetch is traced here (trace.go). Every call that may wait for the SSD
// takes the caller's context; a read that fails or is cancelled changes
// nothing, so the block stays retrievable.

// tier names where a block's KV copy below the engine is kept.
type tier uint8

const (
	tierNone  tier = iota // no copy
	tierArena             // the host-RAM arena
	tierSSD               // the SSD tier
)

func (t tier) String() string {
	switch t {
	case tierArena:
		return TierArena
	case tierSSD:
		return TierSSD
	}
	return "none"
}

// tiers owns the arena, the SSD tier and the orphan tapes the arena holds.
// The arena fields change only at a model load or unload; everything runs
// under the slot token except the SSD tier's own calls (coldstore.Store
// is safe for concurrent use) and status.
type tiers struct {
	log     *slog.Logger
	metrics *metrics

	ssd    *coldstore.Store // nil when off
	ssdDir string
	ssdOff string // why the SSD tier is off

	arena      *shm.Arena // the loaded model's; nil without a hot set
	arenaBytes int64
	compat     coldstore.Compat // SSD keys of the loaded model's blocks
	elemBytes  int              // the loaded KV type's byte-plane stride
	orphans    []*orphanTape    // parked blocks without a session, oldest first
}

func newTiers(log *slog.Logger, m *metrics) *tiers { return &tiers{log: log, metrics: m} }

// openSSD opens the SSD tier; failures are logged and leave it off.
func (t *tiers) openSSD(ctx context.Context, cfg *Config) {
	if cfg.NoCold {
		t.ssdOff = "disabled by configuration (--no-cold)"
		return
	}
	dir := cfg.ColdDir
	if dir == "" {
		dir = filepath.Join(cfg.DataDir, "cold")
	}
	quota := cfg.ColdQuotaBytes
	if quota == 0 {
		quota = derivedColdQuota(dir)
	}
	st, rep, err := coldstore.Open(ctx, coldstore.Config{
		Dir: dir, QuotaBytes: quota, Workers: 1, Logger: t.log.With("tier", "ssd"),
	})
	if err != nil {
		t.ssdOff = fmt.Sprintf("cannot open %s: %v", dir, err)
		t.log.Warn("SSD tier off: sessions run on host RAM only", "dir", dir, "err", err)
		return
	}
	for _, p := range rep.SetAside {
		t.log.Warn("SSD tier: file set aside", "path", p.Path, "kind", p.Kind, "err", p.Err)
	}
	t.log.Info("SSD tier open", "dir", dir, "blocks", rep.Blocks, "snapshots", rep.Snapshots, "bytes", rep.Bytes, "quota", quota)
	t.ssd, t.ssdDir = st, dir
}

// derivedColdQuota is a quarter of the free space where the store lives
// (its parent when the folder does not exist yet); 1 GiB when that cannot
// be measured.
func derivedColdQuota(dir string) int64 {
	var fs unix.Statfs_t
	for d := dir; ; d = filepath.Dir(d) {
		if err := unix.Statfs(d, &fs); err == nil {
			break
		}
		if d == filepath.Dir(d) {
			return 1 << 30
		}
	}
	free := int64(fs.Bavail) * int64(fs.Bsize)
	return max(free/4, 1)
}

// errSSDOff is the SSD tier being off, with the reason.
func (t *tiers) errSSDOff() error { return fmt.Errorf("the SSD tier is off: %s", t.ssdOff) }

// ssdQuota is the SSD tier's quota in bytes (0: off).
func (t *tiers) ssdQuota() int64 {
	if t.ssd == nil {
		return 0
	}
	return t.ssd.Stats().QuotaBytes
}

// status reports the SSD tier (snapshots: how many the index holds).
func (t *tiers) status(snapshots int) *pb.ColdStatus {
	if t.ssd == nil {
		return &pb.ColdStatus{Unavailable: t.ssdOff}
	}
	st := t.ssd.Stats()
	return &pb.ColdStatus{
		Enabled: true, Dir: t.ssdDir, Blocks: int64(st.Blocks), Bytes: st.Bytes, RawBytes: st.RawBytes,
		QuotaBytes: st.QuotaBytes, Queued: int64(st.Queued), Written: st.Written, Failed: st.Failed,
		Unavailable: st.Unavailable, Snapshots: int32(snapshots),
	}
}

// attach takes the loaded model's arena and its orphan tapes; compat and
// elemBytes key and lay out its blocks in the SSD tier.
func (t *tiers) attach(a *shm.Arena, arenaBytes int64, orphans []*orphanTape, compat coldstore.Compat, elemBytes int) {
	t.arena, t.arenaBytes, t.orphans, t.compat, t.elemBytes = a, arenaBytes, orphans, compat, elemBytes
	t.metrics.setArena(a)
}

// detach closes the arena at an unload.
func (t *tiers) detach() {
	if t.arena != nil {
		if err := t.arena.Close(); err != nil {
			t.log.Warn("arena: closing", "err", err)
		}
	}
	t.arena, t.arenaBytes, t.orphans = nil, 0, nil
	t.metrics.setArena(nil)
}

// close closes the SSD tier at shutdown, writing what is queued until ctx
// ends.
func (t *tiers) close(ctx context.Context) {
	if t.ssd != nil {
		if err := t.ssd.CloseContext(ctx); err != nil {
			t.log.Warn("SSD tier: closing", "err", err)
		}
	}
}

// park copies a block's KV into the arena. A full arena frees orphan
// tapes first (closed sessions' blocks go before a live session's); when
// it is still full park fails with shm.ErrArenaFull and the caller picks a
// victim to spill or drop.
func (t *tiers) park(b shm.Block) error {
	if t.arena == nil {
		return errors.New("no host-RAM arena")
	}
	for {
		err := t.arena.Put(b)
		if err == nil {
			t.metrics.arenaParked.Inc()
			return nil
		}
		if !errors.Is(err, shm.ErrArenaFull) || !t.freeOrphan() {
			return err
		}
	}
}

// dropParked frees a block's arena copy; a failure (the arena closed, the
// block already gone) is logged: the copy is unusable either way.
func (t *tiers) dropParked(id uint64) {
	if t.arena == nil {
		return
	}
	if err := t.arena.Delete(id); err != nil {
		t.log.Warn("arena: freeing a block", "id", id, "err", err)
	}
}

// dropSSD forgets a block's SSD copy: the quota may collect it again.
func (t *tiers) dropSSD(key coldstore.Key) {
	if t.ssd != nil && key != (coldstore.Key{}) {
		t.ssd.Unpin(key)
	}
}

// drop frees a block's copy in tier where.
func (t *tiers) drop(where tier, id uint64, key coldstore.Key) {
	switch where {
	case tierArena:
		t.dropParked(id)
	case tierSSD:
		t.dropSSD(key)
	}
}

// spill writes a parked block's KV to the SSD tier before the arena lets
// it go, and pins it there while a session may retrieve it. key is the
// block's SSD key when already known (zero: computed here from the
// bytes). Compression and the write run in the tier's background workers;
// when their queue is full the write happens here under ctx
// (back-pressure, not loss). The arena copy is left for the caller to drop.
func (t *tiers) spill(ctx context.Context, id uint64, key coldstore.Key, meta coldstore.BlockMeta) (coldstore.Key, error) {
	if t.ssd == nil {
		return key, t.errSSDOff()
	}
	if err := t.ssd.Err(); err != nil {
		return key, err
	}
	kv, err := t.arena.ReadKV(id, nil)
	if err != nil {
		return key, err
	}
	if key == (coldstore.Key{}) {
		key = contentKey(t.compat, meta.Chain, meta.Pos0, kv)
	}
	meta.ElemBytes = t.elemBytes
	if _, err := t.store(ctx, key, meta, [][]byte{kv}, false); err != nil {
		return key, err
	}
	t.ssd.Pin(key)
	return key, nil
}

// store writes a blob of parts (each an engine blob of its own) to the SSD
// tier unless it already holds key; it reports whether it wrote. With
// wait the write is flushed before it returns; without, it runs in the
// tier's workers when their queue has room.
func (t *tiers) store(ctx context.Context, key coldstore.Key, meta coldstore.BlockMeta, parts [][]byte, wait bool) (bool, error) {
	if t.ssd.Has(key) {
		return false, nil
	}
	stored := encodeSSDBlob(parts)
	err := t.ssd.Enqueue(key, meta, stored)
	if errors.Is(err, coldstore.ErrQueueFull) {
		err = t.ssd.Put(ctx, key, meta, stored)
	}
	if err == nil && wait {
		err = t.ssd.Flush(ctx)
	}
	return err == nil, err
}

// fetch reads a block's KV from tier where into dst (reused when large
// enough): the arena_lookup or decompress phase of a fetch. A failed or
// cancelled read leaves the copy as it was.
func (t *tiers) fetch(ctx context.Context, where tier, id uint64, key coldstore.Key, dst []byte) ([]byte, error) {
	switch where {
	case tierArena:
		return t.readParked(id, dst)
	case tierSSD:
		return t.readSSDBlock(ctx, id, key)
	}
	return nil, fmt.Errorf("block %d has no copy below the engine", id)
}

// readParked reads block id's KV from the arena into dst: the
// arena_lookup phase of a fetch, also the fetch latency of tier "arena".
func (t *tiers) readParked(id uint64, dst []byte) ([]byte, error) {
	tm := t.metrics.beginPhase(phaseArenaLookup, id)
	kv, err := t.arena.ReadKV(id, dst)
	d := tm.end()
	if err == nil {
		t.metrics.ObserveFetch(TierArena, d)
	}
	return kv, err
}

// readSSDBlock reads a spilled block back, waiting for its write when it
// is still queued.
func (t *tiers) readSSDBlock(ctx context.Context, id uint64, key coldstore.Key) ([]byte, error) {
	if t.ssd == nil || key == (coldstore.Key{}) {
		return nil, fmt.Errorf("block %d has no copy in the SSD tier", id)
	}
	kv, err := t.readSSD(ctx, key, id)
	if errors.Is(err, coldstore.ErrNotFound) {
		if ferr := t.ssd.Flush(ctx); ferr != nil {
			return nil, ferr
		}
		kv, err = t.readSSD(ctx, key, id)
	}
	return kv, err
}

// readSSD reads key's blob from the SSD tier as the engine's bytes: the
// decompress phase of fetching block id (0: a snapshot's), also the fetch
// latency of tier "ssd".
func (t *tiers) readSSD(ctx context.Context, key coldstore.Key, id uint64) ([]byte, error) {
	tm := t.metrics.beginPhase(phaseDecompress, id)
	_, stored, err := t.ssd.Get(ctx, key)
	var blob []byte
	if err == nil {
		blob, err = decodeSSDBlob(stored)
	}
	d := tm.end()
	if err == nil {
		t.metrics.ObserveFetch(TierSSD, d)
		t.metrics.ObserveColdRead(len(blob), d)
	}
	return blob, err
}

// insert puts a fetched block's KV into the engine at position at: the
// engine_insert phase of a fetch.
func (t *tiers) insert(ectx engine.Context, id uint64, r engine.Range, at int) error {
	tm := t.metrics.beginPhase(phaseEngineInsert, id)
	err := ectx.InsertRange(r, at)
	tm.end()
	return err
}

// fetched is one blob read from the SSD tier.
type fetched struct {
	blob []byte
	err  error
}

// fetchAll reads keys in order in the background, a few blobs ahead of
// the consumer, so decompression overlaps engine inserts.
func (t *tiers) fetchAll(ctx context.Context, keys []coldstore.Key) (<-chan fetched, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan fetched, 4)
	go func() {
		defer close(out)
		for _, k := range keys {
			blob, err := t.readSSD(ctx, k, 0)
			select {
			case out <- fetched{blob, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, cancel
}

// keepOrphan keeps a closing session's chain-contiguous parked blocks as
// an orphan tape for a later session to resume.
func (t *tiers) keepOrphan(o *orphanTape) {
	if len(o.blocks) > 0 {
		t.orphans = append(t.orphans, o)
	}
}

// freeOrphan drops the oldest orphan tape's blocks; false when none is left.
func (t *tiers) freeOrphan() bool {
	if len(t.orphans) == 0 {
		return false
	}
	o := t.orphans[0]
	t.orphans = t.orphans[1:]
	for _, m := range o.blocks {
		t.dropParked(m.ID)
	}
	return true
}

// orphanPrefixes are, per orphan tape (oldest first), the tokens it
// shares with target.
func (t *tiers) orphanPrefixes(target []engine.Token) []int {
	out := make([]int, len(t.orphans))
	for i, o := range t.orphans {
		out[i] = commonPrefix(o.tokens, target)
	}
	return out
}

// takeOrphan removes orphan tape i and hands it to the caller.
func (t *tiers) takeOrphan(i int) *orphanTape {
	o := t.orphans[i]
	t.orphans = append(t.orphans[:i:i], t.orphans[i+1:]...)
	return o
}

// copyParked copies block id's KV out of the arena for a snapshot (no
// fetch: nothing enters the engine, so it is not traced).
func (t *tiers) copyParked(id uint64) ([]byte, error) { return t.arena.ReadKV(id, nil) }
