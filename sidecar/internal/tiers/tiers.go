package tiers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ctxd/ctxd/coldstore"
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/shm"
)

// Tier names where a block's KV copy below the engine is kept.
type Tier uint8

const (
	None  Tier = iota // no copy
	Arena             // the host-RAM arena
	SSD               // the SSD tier
)

// String names the tier as metrics label it: "arena", "ssd" (or "none").
func (t Tier) String() string {
	switch t {
	case Arena:
		return "arena"
	case SSD:
		return "ssd"
	}
	return "none"
}

// Tiers owns the arena, the SSD tier and the orphan tapes the arena holds.
// The arena fields change only at a model load or unload; every method
// runs under the daemon's engine token except the SSD tier's own calls
// (coldstore.Store is safe for concurrent use), Status and FetchAll's
// reader.
type Tiers struct {
	log   *slog.Logger
	obs   Observer
	codec engine.BlobCodec // the engine's state-blob layout, for the SSD envelope

	ssd    *coldstore.Store // nil when off
	ssdDir string
	ssdOff string // why the SSD tier is off

	arena      *shm.Arena // the loaded model's; nil without a hot set
	arenaBytes int64
	compat     coldstore.Compat    // SSD keys of the loaded model's blocks
	elemBytes  int                 // the loaded KV type's byte-plane stride
	orphans    []*OrphanTape       // parked blocks without a session, oldest first
	spanRecs   map[uint64]*spanRec // live sessions' spans records (orphanspans.go)

	// The arena could not grow (a full filesystem): its slabs then, and
	// their bytes, the capacity ArenaBytes reports until it grows again.
	noSpace    atomic.Bool
	onCapacity func()
	stuckSlabs atomic.Int64
	stuckBytes atomic.Int64
}

// New returns tiers with neither an SSD tier (OpenSSD) nor an arena
// (Attach); obs records what they do, codec lays the engine's blobs out
// for the SSD tier.
func New(log *slog.Logger, obs Observer, codec engine.BlobCodec) *Tiers {
	return &Tiers{log: log, obs: obs, codec: codec}
}

// SSDConfig says where the SSD tier lives.
type SSDConfig struct {
	Off        string // non-empty: the tier stays off, for this reason
	Dir        string
	QuotaBytes int64 // 0: a quarter of the free space where it lives
}

// OpenSSD opens the SSD tier; failures are logged and leave it off.
func (t *Tiers) OpenSSD(ctx context.Context, cfg SSDConfig) {
	if cfg.Off != "" {
		t.ssdOff = cfg.Off
		return
	}
	dir, quota := cfg.Dir, cfg.QuotaBytes
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

// derivedColdQuota is policy.SSDQuota of the free space where the store
// lives (its parent when the folder does not exist yet).
func derivedColdQuota(dir string) int64 {
	var fs unix.Statfs_t
	for d := dir; ; d = filepath.Dir(d) {
		if err := unix.Statfs(d, &fs); err == nil {
			break
		}
		if d == filepath.Dir(d) {
			return policy.SSDQuota(0, -1)
		}
	}
	return policy.SSDQuota(0, int64(fs.Bavail)*int64(fs.Bsize))
}

// SSD is the SSD tier, or nil when it is off.
func (t *Tiers) SSD() *coldstore.Store { return t.ssd }

// HasArena reports whether the loaded model has an arena.
func (t *Tiers) HasArena() bool { return t.arena != nil }

// ArenaBytes is the arena's budget (0: no arena).
// While the arena cannot grow (its filesystem is full) it is what the
// arena holds now.
func (t *Tiers) ArenaBytes() int64 {
	if t.noSpace.Load() {
		return min(t.arenaBytes, t.stuckBytes.Load())
	}
	return t.arenaBytes
}

// ArenaStats are the arena's figures; false without an arena.
func (t *Tiers) ArenaStats() (shm.Stats, bool) {
	if t.arena == nil {
		return shm.Stats{}, false
	}
	return t.arena.Stats(), true
}

// ErrSSDOff is the SSD tier being off, with the reason.
func (t *Tiers) ErrSSDOff() error { return fmt.Errorf("the SSD tier is off: %s", t.ssdOff) }

// SSDQuota is the SSD tier's quota in bytes (0: off).
func (t *Tiers) SSDQuota() int64 {
	if t.ssd == nil {
		return 0
	}
	return t.ssd.Stats().QuotaBytes
}

// Status reports the SSD tier (snapshots: how many the index holds).
func (t *Tiers) Status(snapshots int) *pb.ColdStatus {
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

// OpenedArena is a host-RAM arena OpenArena opened, for Attach: the arena, its
// budget, the orphan tapes an earlier run left in it, and the highest
// block and session ids they use (new ones continue above).
type OpenedArena struct {
	Arena             *shm.Arena
	Bytes             int64
	Orphans           []*OrphanTape
	MaxID, MaxSession uint64
}

// OpenArena opens the host-RAM arena in dir with a budget of bytes for
// blocks keyed by compat: the tiers own it, the daemon's shell only says
// where and how large (policy.ArenaBudget). Files set aside and blocks
// dropped are logged; parked blocks of a previous run become orphan tapes
// that new sessions resume from (layout/adopt.go).
func (t *Tiers) OpenArena(dir string, bytes int64, compat string) (*OpenedArena, error) {
	a, rep, err := shm.Open(dir, shm.Options{BudgetBytes: bytes, Compat: compat})
	if err != nil {
		return nil, err
	}
	for _, sa := range rep.SetAside {
		t.log.Warn("arena file set aside", "path", sa.Path, "moved_to", sa.MovedTo, "err", sa.Err)
	}
	for _, d := range rep.Dropped {
		t.log.Warn("arena block dropped", "id", d.ID, "err", d.Err)
	}
	out := &OpenedArena{Arena: a, Bytes: bytes}
	out.Orphans, out.MaxID, out.MaxSession = CollectOrphans(a, t.log)
	if n := len(out.Orphans); n > 0 {
		t.log.Warn("arena re-attached: parked blocks of an earlier ctxd kept for resume", "tapes", n)
	}
	return out, nil
}

// Attach takes the loaded model's arena and its orphan tapes; compat and
// elemBytes key and lay out its blocks in the SSD tier.
func (t *Tiers) Attach(a *shm.Arena, arenaBytes int64, orphans []*OrphanTape, compat coldstore.Compat, elemBytes int) {
	t.arena, t.arenaBytes, t.orphans, t.compat, t.elemBytes = a, arenaBytes, orphans, compat, elemBytes
	t.spanRecs = nil
	t.obs.ArenaChanged(a)
}

// Detach closes the arena at an unload.
func (t *Tiers) Detach() {
	if t.arena != nil {
		if err := t.arena.Close(); err != nil {
			t.log.Warn("arena: closing", "err", err)
		}
	}
	t.arena, t.arenaBytes, t.orphans, t.spanRecs = nil, 0, nil, nil
	t.noSpace.Store(false)
	t.obs.ArenaChanged(nil)
}

// Close closes the SSD tier at shutdown, writing what is queued until ctx
// ends.
func (t *Tiers) Close(ctx context.Context) {
	if t.ssd != nil {
		if err := t.ssd.CloseContext(ctx); err != nil {
			t.log.Warn("SSD tier: closing", "err", err)
		}
	}
}

// Park copies a block's KV into the arena. A full arena frees orphan
// tapes first (closed sessions' blocks go before a live session's); when
// it is still full park fails with shm.ErrArenaFull and the caller picks a
// victim to spill or drop.
//
// An arena that cannot grow because the filesystem under it is full
// (ENOSPC, EDQUOT, EFBIG from fallocate) degrades loudly: the first time
// is logged, every time is counted (ctxd_arena_no_space_total), the
// capacity ArenaBytes reports becomes what the arena really holds, and the
// error wraps shm.ErrArenaFull, so the caller moves blocks on to the SSD
// tier as from a full arena instead of losing them.
func (t *Tiers) Park(b shm.Block) error {
	if t.arena == nil {
		return errors.New("no host-RAM arena")
	}
	for {
		err := t.arena.Put(b)
		if err == nil {
			t.obs.Parked()
			if t.noSpace.Load() && t.arena.Stats().Slabs > t.stuckSlabs.Load() {
				t.noSpace.Store(false)
				t.log.Info("the host-RAM arena grows again", "budget_bytes", t.arenaBytes)
			}
			return nil
		}
		if isNoSpace(err) {
			t.arenaNoSpace(err)
			err = fmt.Errorf("%w: %w: %w", shm.ErrArenaFull, ErrNoSpace, err)
		}
		if !errors.Is(err, shm.ErrArenaFull) || !t.FreeOrphan() {
			return err
		}
	}
}

// ErrNoSpace: the arena cannot grow because its filesystem is full (it
// wraps shm.ErrArenaFull too).
var ErrNoSpace = errors.New("the host-RAM arena's filesystem is full")

// StoreBlock writes a block's KV that the arena cannot take straight to
// the SSD tier and pins it there, as Spill does for a parked block; it
// returns the block's SSD key.
func (t *Tiers) StoreBlock(ctx context.Context, meta coldstore.BlockMeta, kv []byte) (coldstore.Key, error) {
	if t.ssd == nil {
		return coldstore.Key{}, t.ErrSSDOff()
	}
	if err := t.ssd.Err(); err != nil {
		return coldstore.Key{}, err
	}
	key := ContentKey(t.compat, meta.Chain, meta.Pos0, kv)
	meta.ElemBytes = t.elemBytes
	if _, err := t.Store(ctx, key, meta, [][]byte{kv}, false); err != nil {
		return key, err
	}
	t.ssd.Pin(key)
	return key, nil
}

// OnCapacityChange sets what runs (under the engine token) when the
// arena's real capacity changes: the daemon republishes its status.
func (t *Tiers) OnCapacityChange(f func()) { t.onCapacity = f }

// noSpaceObserver is an Observer that also counts an arena that could not
// grow (the daemon's metrics).
type noSpaceObserver interface{ ArenaNoSpace() }

// arenaNoSpace records an arena that could not grow: counted every time,
// logged when it starts, its real capacity kept for ArenaBytes.
func (t *Tiers) arenaNoSpace(err error) {
	if o, ok := t.obs.(noSpaceObserver); ok {
		o.ArenaNoSpace()
	}
	st := t.arena.Stats()
	t.stuckSlabs.Store(st.Slabs)
	t.stuckBytes.Store(st.Slabs * st.SlabBytes)
	if !t.noSpace.Swap(true) {
		if t.onCapacity != nil {
			t.onCapacity()
		}
		t.log.Warn("the host-RAM arena cannot grow: its filesystem is full; parked blocks go to the SSD tier, capacity is what the arena holds now",
			"err", err, "capacity_bytes", st.Slabs*st.SlabBytes, "budget_bytes", t.arenaBytes)
	}
}

// isNoSpace reports a write refused for want of space.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}

// DropParked frees a block's arena copy; a failure (the arena closed, the
// block already gone) is logged: the copy is unusable either way.
func (t *Tiers) DropParked(id uint64) {
	if t.arena == nil {
		return
	}
	if err := t.arena.Delete(id); err != nil {
		t.log.Warn("arena: freeing a block", "id", id, "err", err)
	}
}

// DropSSD forgets a block's SSD copy: the quota may collect it again.
func (t *Tiers) DropSSD(key coldstore.Key) {
	if t.ssd != nil && key != (coldstore.Key{}) {
		t.ssd.Unpin(key)
	}
}

// Drop frees a block's copy in tier where.
func (t *Tiers) Drop(where Tier, id uint64, key coldstore.Key) {
	switch where {
	case Arena:
		t.DropParked(id)
	case SSD:
		t.DropSSD(key)
	}
}

// Spill writes a parked block's KV to the SSD tier before the arena lets
// it go, and pins it there while a session may retrieve it. key is the
// block's SSD key when already known (zero: computed here from the
// bytes). Compression and the write run in the tier's background workers;
// when their queue is full the write happens here under ctx
// (back-pressure, not loss). The arena copy is left for the caller to drop.
func (t *Tiers) Spill(ctx context.Context, id uint64, key coldstore.Key, meta coldstore.BlockMeta) (coldstore.Key, error) {
	if t.ssd == nil {
		return key, t.ErrSSDOff()
	}
	if err := t.ssd.Err(); err != nil {
		return key, err
	}
	kv, err := t.arena.ReadKV(id, nil)
	if err != nil {
		return key, err
	}
	if key == (coldstore.Key{}) {
		key = ContentKey(t.compat, meta.Chain, meta.Pos0, kv)
	}
	meta.ElemBytes = t.elemBytes
	if _, err := t.Store(ctx, key, meta, [][]byte{kv}, false); err != nil {
		return key, err
	}
	t.ssd.Pin(key)
	return key, nil
}

// Store writes a blob of parts (each an engine blob of its own) to the SSD
// tier unless it already holds key; it reports whether it wrote. With
// wait the write is flushed before it returns; without, it runs in the
// tier's workers when their queue has room.
func (t *Tiers) Store(ctx context.Context, key coldstore.Key, meta coldstore.BlockMeta, parts [][]byte, wait bool) (bool, error) {
	if t.ssd.Has(key) {
		return false, nil
	}
	stored := EncodeBlob(t.codec, parts)
	err := t.ssd.Enqueue(key, meta, stored)
	if errors.Is(err, coldstore.ErrQueueFull) {
		err = t.ssd.Put(ctx, key, meta, stored)
	}
	if err == nil && wait {
		err = t.ssd.Flush(ctx)
	}
	return err == nil, err
}

// Fetch reads a block's KV from tier where into dst (reused when large
// enough): the arena_lookup or decompress phase of a fetch. A failed or
// cancelled read leaves the copy as it was.
func (t *Tiers) Fetch(ctx context.Context, where Tier, id uint64, key coldstore.Key, dst []byte) ([]byte, error) {
	switch where {
	case Arena:
		return t.ReadParked(id, dst)
	case SSD:
		return t.readSSDBlock(ctx, id, key)
	}
	return nil, fmt.Errorf("block %d has no copy below the engine", id)
}

// ReadParked reads block id's KV from the arena into dst: the
// arena_lookup phase of a fetch, also the fetch latency of tier "arena".
func (t *Tiers) ReadParked(id uint64, dst []byte) ([]byte, error) {
	end := t.obs.FetchPhase(PhaseArenaLookup, id)
	kv, err := t.arena.ReadKV(id, dst)
	d := end()
	if err == nil {
		t.obs.Fetched(Arena, d)
	}
	return kv, err
}

// readSSDBlock reads a spilled block back, waiting for its write when it
// is still queued.
func (t *Tiers) readSSDBlock(ctx context.Context, id uint64, key coldstore.Key) ([]byte, error) {
	if t.ssd == nil || key == (coldstore.Key{}) {
		return nil, fmt.Errorf("block %d has no copy in the SSD tier", id)
	}
	kv, err := t.ReadSSD(ctx, key, id)
	if errors.Is(err, coldstore.ErrNotFound) {
		if ferr := t.ssd.Flush(ctx); ferr != nil {
			return nil, ferr
		}
		kv, err = t.ReadSSD(ctx, key, id)
	}
	return kv, err
}

// ReadSSD reads key's blob from the SSD tier as the engine's bytes: the
// decompress phase of fetching block id (0: a snapshot's), also the fetch
// latency of tier "ssd".
func (t *Tiers) ReadSSD(ctx context.Context, key coldstore.Key, id uint64) ([]byte, error) {
	end := t.obs.FetchPhase(PhaseDecompress, id)
	_, stored, err := t.ssd.Get(ctx, key)
	var blob []byte
	if err == nil {
		blob, err = DecodeBlob(t.codec, stored)
	}
	d := end()
	if err == nil {
		t.obs.Fetched(SSD, d)
		t.obs.SSDRead(len(blob), d)
	}
	return blob, err
}

// Insert puts a fetched block's KV into the engine at position at: the
// engine_insert phase of a fetch.
func (t *Tiers) Insert(ectx engine.Context, id uint64, r engine.Range, at int) error {
	end := t.obs.FetchPhase(PhaseEngineInsert, id)
	err := ectx.InsertRange(r, at)
	end()
	return err
}

// Fetched is one blob read from the SSD tier.
type Fetched struct {
	Blob []byte
	Err  error
}

// FetchAll reads keys in order in the background, a few blobs ahead of
// the consumer, so decompression overlaps engine inserts.
func (t *Tiers) FetchAll(ctx context.Context, keys []coldstore.Key) (<-chan Fetched, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan Fetched, 4)
	go func() {
		defer close(out)
		for _, k := range keys {
			blob, err := t.ReadSSD(ctx, k, 0)
			select {
			case out <- Fetched{blob, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, cancel
}

// KeepOrphan keeps a closing session's chain-contiguous parked blocks as
// an orphan tape for a later session to resume, with the session's spans
// record rewritten to cover them (o.Session names it, o.Spans are the
// tape's whole segments).
func (t *Tiers) KeepOrphan(o *OrphanTape) {
	t.keepSpans(o)
	if len(o.Blocks) > 0 {
		t.orphans = append(t.orphans, o)
	}
}

// FreeOrphan drops the oldest orphan tape's blocks; false when none is left.
func (t *Tiers) FreeOrphan() bool {
	if len(t.orphans) == 0 {
		return false
	}
	o := t.orphans[0]
	t.orphans = t.orphans[1:]
	for _, m := range o.Blocks {
		t.DropParked(m.ID)
	}
	t.dropOrphanSpans(o)
	t.dropTail(o)
	return true
}

// OrphanPrefixes are, per orphan tape (oldest first), the tokens it
// shares with target.
func (t *Tiers) OrphanPrefixes(target []engine.Token) []int {
	out := make([]int, len(t.orphans))
	for i, o := range t.orphans {
		out[i] = commonPrefix(o.Tokens, target)
	}
	return out
}

// TakeOrphan removes orphan tape i and hands it to the caller, who frees
// its tail (TakeTail).
func (t *Tiers) TakeOrphan(i int) *OrphanTape {
	o := t.orphans[i]
	t.orphans = append(t.orphans[:i:i], t.orphans[i+1:]...)
	t.dropOrphanSpans(o) // its blocks become the taker's, who records its own
	return o
}

// CopyParked copies block id's KV out of the arena for a snapshot (no
// fetch: nothing enters the engine, so it is not traced).
func (t *Tiers) CopyParked(id uint64) ([]byte, error) { return t.arena.ReadKV(id, nil) }

func commonPrefix(a, b []engine.Token) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
