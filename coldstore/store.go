package coldstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/internal/privdir"
)

// Config configures a Store.
type Config struct {
	Dir         string        // root folder; created 0700; files 0600
	QuotaBytes  int64         // 0 = no quota
	Workers     int           // background compressors; 0 = 1
	QueueBlocks int           // bounded queue; 0 = 64
	RetryAfter  time.Duration // back-off after ENOSPC/EIO; 0 = 30s
	Logger      *slog.Logger
	// VerifyOnOpen makes Open read every block payload and check its
	// CRC32C too (by default Open checks framing, header CRC and size, and
	// payloads are checked by every Get and by Verify).
	VerifyOnOpen bool
}

// Defaults applied by Open.
const (
	DefaultQueueBlocks = 64
	DefaultRetryAfter  = 30 * time.Second
)

// BlockMeta is what a block carries besides its KV bytes.
type BlockMeta struct {
	Chain     [32]byte // hash chain of the block's tokens (computed by caller)
	Tokens    []int32  // the block's tokens
	Pos0      int      // position the KV was extracted at
	ElemBytes int      // byte-plane stride: 2 f16, 4 f32, 1 no split
	Class     uint8    // cache class (opaque to coldstore)
	Segment   string   // segment id (opaque)
}

func (m BlockMeta) check(blob []byte) error {
	switch {
	case checkElemBytes(m.ElemBytes) != nil:
		return checkElemBytes(m.ElemBytes)
	case m.Pos0 < 0 || int64(m.Pos0) > 1<<31-1:
		return fmt.Errorf("%w: position %d", ErrInvalidArgument, m.Pos0)
	case len(m.Tokens) > maxTokens:
		return fmt.Errorf("%w: %d tokens (at most %d)", ErrInvalidArgument, len(m.Tokens), maxTokens)
	case len(m.Segment) > maxSegmentLen:
		return fmt.Errorf("%w: segment id of %d bytes (at most %d)", ErrInvalidArgument, len(m.Segment), maxSegmentLen)
	case int64(len(blob)) > maxRawLen:
		return fmt.Errorf("%w: blob of %d bytes", ErrInvalidArgument, len(blob))
	}
	return nil
}

// OpenReport is what Open found.
type OpenReport struct {
	Blocks      int
	Snapshots   int
	Bytes       int64     // block and snapshot file bytes indexed
	SetAside    []Problem // files moved to quarantine/
	Missing     []Problem // snapshots kept although blocks they name are missing
	TempRemoved int       // leftover temporary files of interrupted writes, deleted
}

// Stats is a point-in-time view of a Store.
type Stats struct {
	Blocks       int
	Snapshots    int
	Bytes        int64 // block + snapshot file bytes on disk
	RawBytes     int64 // uncompressed KV bytes of the stored blocks
	QuotaBytes   int64
	Queued       int    // blocks waiting for (or in) background compression
	Written      int64  // blocks written since Open
	Failed       int64  // blocks accepted (Enqueue) or attempted (Put) but not written
	Refused      int64  // Enqueue/Put calls refused (queue full, unavailable, closed)
	Evicted      int64  // blocks removed by GC
	SetAside     int64  // files moved to quarantine since Open (Open's included)
	ReadBytes    int64  // file bytes read by Get
	WrittenBytes int64  // file bytes written (blocks and snapshots)
	Unavailable  string // the disk fault the store stands aside for; "" when healthy
}

// blockEntry is one indexed block file.
type blockEntry struct {
	key     Key
	size    int64 // file bytes
	raw     int64 // KV bytes
	tokens  int
	touched time.Time // the file's mtime as last set; Get refreshes it unless it is already the newest
	elem    *list.Element
}

// snapEntry is one indexed snapshot file.
type snapEntry struct {
	name    string
	created time.Time
	compat  Compat
	tokens  int
	blocks  []Key
	size    int64
}

// fault is the disk fault a store stands aside for.
type fault struct {
	cause   error
	since   time.Time
	retryAt time.Time
	full    bool // out of space: freeing space ends the back-off
}

// Store is an open cold store. It is safe for concurrent use.
type Store struct {
	cfg                                Config
	log                                *slog.Logger
	root, blocksDir, snapsDir, quarDir string
	lockFile                           *os.File
	codec                              *codec
	ops                                atomic.Pointer[fileOps]
	readBufs                           sync.Pool // *[]byte payload buffers for readBlock

	clock func() time.Time // time.Now; tests replace it before any write, to drive back-offs

	mu sync.Mutex // guards everything below up to the counters
	// index
	closed      bool
	blocks      map[Key]*blockEntry
	lru         list.List // of *blockEntry; front = most recently used
	snaps       map[string]*snapEntry
	refs        map[Key]int // snapshot references per block (a snapshot naming a block twice counts twice)
	pins        map[Key]int // in-memory pins (Pin/Unpin): blocks a live session needs
	bytes       int64       // block + snapshot file bytes
	rawBytes    int64       // KV bytes of the indexed blocks
	newestTouch time.Time   // newest mtime set on a block file (write or Get)
	// faults
	fault           *fault
	overQuotaLogged time.Time // last "over quota" warning (at most one a minute)
	// queue
	queue     chan *job
	pending   map[Key]*job     // queued or being written
	inflight  map[uint64]Key   // sequence numbers not finished
	seq       uint64           // last sequence number given out
	flushMark uint64           // highest sequence a Flush has claimed
	failures  map[uint64]error // failed jobs not yet reported by Flush
	changed   chan struct{}    // closed and replaced when a job finishes

	snapMu  sync.Mutex     // serialises SaveSnapshot and DeleteSnapshot
	abort   atomic.Bool    // CloseContext ran out of time: fail what is left
	workers sync.WaitGroup // the background compressors
	active  sync.WaitGroup // calls in progress (enter/leave); Close waits for them

	written, failed, refused, evicted, setAside atomic.Int64
	readBytes, writtenBytes                     atomic.Int64
}

// maxFailuresKept bounds the failures remembered for Flush.
const maxFailuresKept = 1024

// Open opens (creating if need be) the store in cfg.Dir: it takes the
// folder's lock, removes temporary files of interrupted writes, rebuilds
// the index from the block and snapshot files, moves files that fail
// their checks to quarantine/ (listed in the report), starts the
// background compressors, and collects garbage if the quota is exceeded.
func Open(ctx context.Context, cfg Config) (*Store, OpenReport, error) {
	if cfg.Dir == "" {
		return nil, OpenReport{}, fmt.Errorf("%w: Config.Dir is empty", ErrInvalidArgument)
	}
	if cfg.QuotaBytes < 0 || cfg.Workers < 0 || cfg.QueueBlocks < 0 || cfg.RetryAfter < 0 {
		return nil, OpenReport{}, fmt.Errorf("%w: negative Config field", ErrInvalidArgument)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.QueueBlocks == 0 {
		cfg.QueueBlocks = DefaultQueueBlocks
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = DefaultRetryAfter
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, OpenReport{}, fmt.Errorf("coldstore: %w", err)
	}
	s := &Store{
		cfg:       cfg,
		log:       log.With("component", "coldstore"),
		root:      root,
		blocksDir: filepath.Join(root, "blocks"),
		snapsDir:  filepath.Join(root, "snapshots"),
		quarDir:   filepath.Join(root, "quarantine"),
		blocks:    make(map[Key]*blockEntry),
		snaps:     make(map[string]*snapEntry),
		refs:      make(map[Key]int),
		pins:      make(map[Key]int),
		pending:   make(map[Key]*job),
		inflight:  make(map[uint64]Key),
		failures:  make(map[uint64]error),
		changed:   make(chan struct{}),
		clock:     time.Now,
	}
	s.ops.Store(realFileOps())
	// Never through a symbolic link, never another uid's folder.
	if err := privdir.Ensure(root); err != nil {
		return nil, OpenReport{}, fmt.Errorf("coldstore: %w", err)
	}
	// Its folders too: a link at blocks/ or snapshots/ would make the
	// store read, and set aside, another folder's files.
	for _, d := range []string{s.blocksDir, s.snapsDir, s.quarDir} {
		if err := privdir.Ensure(d); err != nil {
			return nil, OpenReport{}, fmt.Errorf("coldstore: %w", err)
		}
	}
	syncDir(root)
	s.lockFile, err = lockDir(root)
	if err != nil {
		return nil, OpenReport{}, err
	}
	var rep OpenReport
	if err := s.load(ctx, &rep); err != nil {
		s.unlock()
		return nil, OpenReport{}, err
	}
	s.codec, err = newCodec(cfg.Workers+runtime.GOMAXPROCS(0), 2*runtime.GOMAXPROCS(0))
	if err != nil {
		s.unlock()
		return nil, OpenReport{}, err
	}
	s.queue = make(chan *job, cfg.QueueBlocks)
	for range cfg.Workers {
		s.workers.Go(s.worker)
	}
	rep.Blocks, rep.Snapshots, rep.Bytes = len(s.blocks), len(s.snaps), s.bytes
	s.setAside.Add(int64(len(rep.SetAside)))
	for _, p := range rep.SetAside {
		s.log.Warn("file set aside", "path", p.Path, "kind", p.Kind, "err", p.Err, "moved_to", p.MovedTo)
	}
	for _, p := range rep.Missing {
		s.log.Warn("snapshot names missing blocks", "path", p.Path, "err", p.Err)
	}
	if cfg.QuotaBytes > 0 && s.bytes > cfg.QuotaBytes {
		if _, _, err := s.GC(ctx); err != nil {
			s.log.Warn("gc at open", "err", err)
		}
	}
	s.log.Info("opened", "dir", root, "blocks", rep.Blocks, "snapshots", rep.Snapshots, "bytes", rep.Bytes,
		"set_aside", len(rep.SetAside), "temp_removed", rep.TempRemoved)
	return s, rep, nil
}

// enter registers a call in progress, or returns ErrClosed.
func (s *Store) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.active.Add(1)
	return nil
}

func (s *Store) leave() { s.active.Done() }

func (s *Store) unlock() {
	if s.lockFile != nil {
		s.lockFile.Close() // releases the flock
		s.lockFile = nil
	}
}

// blockPath is blocks/<first two hex digits>/<hex>.blk.
func (s *Store) blockPath(k Key) string {
	h := k.String()
	return filepath.Join(s.blocksDir, h[:2], h+blockExt)
}

func (s *Store) snapPath(name string) string {
	return filepath.Join(s.snapsDir, name+snapExt)
}

const (
	blockExt = ".blk"
	snapExt  = ".snap"
)

// writeGate says whether writes may be attempted now: nil, or ErrClosed,
// or a wrapped ErrUnavailable while a disk fault's back-off runs.
func (s *Store) writeGateLocked() error {
	if s.closed {
		return ErrClosed
	}
	if f := s.fault; f != nil && s.clock().Before(f.retryAt) {
		return s.faultErrLocked()
	}
	return nil
}

func (s *Store) faultErrLocked() error {
	f := s.fault
	return fmt.Errorf("%w since %s (retry after %s): %w", ErrUnavailable,
		f.since.UTC().Format(time.RFC3339), f.retryAt.UTC().Format(time.RFC3339), f.cause)
}

// noteWriteResult records the outcome of a write attempt: a disk fault
// makes the store stand aside for RetryAfter; a success ends a fault.
// It returns err, wrapped in ErrUnavailable when it is a disk fault.
func (s *Store) noteWriteResult(what string, err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		if s.fault != nil {
			s.log.Info("disk writable again", "after", s.clock().Sub(s.fault.since).Round(time.Millisecond), "cause", s.fault.cause)
			s.fault = nil
		}
		return nil
	}
	if !isDiskFault(err) {
		return err
	}
	now := s.clock()
	if s.fault == nil {
		s.fault = &fault{since: now}
		s.log.Error("disk fault: standing aside", "op", what, "err", err, "retry_after", s.cfg.RetryAfter)
	}
	s.fault.cause = err
	s.fault.retryAt = now.Add(s.cfg.RetryAfter)
	s.fault.full = isDiskFull(err)
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// spaceFreed ends the back-off of an out-of-space fault early.
func (s *Store) spaceFreedLocked(freed int64) {
	if freed > 0 && s.fault != nil && s.fault.full && s.clock().Before(s.fault.retryAt) {
		s.log.Info("space freed: retrying writes", "freed", freed)
		s.fault.retryAt = s.clock()
	}
}

// Err is nil while the store takes writes; while it stands aside after a
// disk fault it is a wrapped ErrUnavailable naming the cause. Once the
// back-off has passed (or space was freed) Err is nil again and the next
// write probes the disk; a failing probe starts a new back-off.
func (s *Store) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fault != nil && s.clock().Before(s.fault.retryAt) {
		return s.faultErrLocked()
	}
	return nil
}

// Has reports whether the block is stored (written and indexed; a block
// still in the queue is not).
func (s *Store) Has(key Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blocks[key]
	return ok
}

// Put compresses blob and writes it as the block key, synchronously and
// atomically; it returns once the file and its folder entry are durable.
// A key already stored is a no-op. While the store stands aside it
// returns a wrapped ErrUnavailable without writing.
func (s *Store) Put(ctx context.Context, key Key, meta BlockMeta, blob []byte) error {
	if err := meta.check(blob); err != nil {
		s.refused.Add(1)
		return err
	}
	if err := s.enter(); err != nil {
		s.refused.Add(1)
		return err
	}
	defer s.leave()
	s.mu.Lock()
	err := s.writeGateLocked()
	_, present := s.blocks[key]
	s.mu.Unlock()
	if err != nil {
		s.refused.Add(1)
		return err
	}
	if present {
		return nil
	}
	if err := s.writeBlock(ctx, key, meta, blob); err != nil {
		s.failed.Add(1)
		return err
	}
	return nil
}

// writeBlock compresses and writes one block, indexes it and collects
// garbage when the quota is exceeded.
func (s *Store) writeBlock(ctx context.Context, key Key, meta BlockMeta, blob []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.Has(key) {
		return nil
	}
	payload, table := s.codec.compress(blob, meta.ElemBytes)
	header := encodeBlockHeader(blockHeader{key: key, meta: meta, rawLen: int64(len(blob)), chunkRaw: s.codec.chunkRaw, table: table})
	prefix := encodePrefix(blockMagic, header, payload)
	path := s.blockPath(key)
	dir := filepath.Dir(path)
	if err := s.ensureDir(dir); err != nil {
		return s.noteWriteResult("mkdir "+dir, err)
	}
	n, err := writeAtomic(s.ops.Load(), dir, filepath.Base(path), prefix, payload)
	if err = s.noteWriteResult("write block "+key.String(), err); err != nil {
		return err
	}
	s.writtenBytes.Add(n)
	s.written.Add(1)
	s.mu.Lock()
	if _, ok := s.blocks[key]; !ok {
		now := time.Now()
		s.insertLocked(&blockEntry{key: key, size: n, raw: int64(len(blob)), tokens: len(meta.Tokens), touched: now}, true)
		s.newestTouch = now
	}
	over := s.cfg.QuotaBytes > 0 && s.bytes > s.cfg.QuotaBytes
	s.mu.Unlock()
	if over {
		if _, _, err := s.GC(ctx); err != nil {
			s.log.Warn("gc after write", "err", err)
		}
	}
	return nil
}

// ensureDir creates a block subfolder (0700) and makes its entry durable.
func (s *Store) ensureDir(dir string) error {
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%w: %s is not a folder (%v)", ErrUnsafeFolder, dir, st.Mode().Type())
		}
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return s.ops.Load().syncDir(filepath.Dir(dir))
}

// insertLocked adds e to the index, most recently used when front.
func (s *Store) insertLocked(e *blockEntry, front bool) {
	s.blocks[e.key] = e
	if front {
		e.elem = s.lru.PushFront(e)
	} else {
		e.elem = s.lru.PushBack(e)
	}
	s.bytes += e.size
	s.rawBytes += e.raw
}

// dropLocked removes e from the index (not its file).
func (s *Store) dropLocked(e *blockEntry) {
	if s.blocks[e.key] != e {
		return
	}
	delete(s.blocks, e.key)
	s.lru.Remove(e.elem)
	s.bytes -= e.size
	s.rawBytes -= e.raw
}

// Get reads, checks and decompresses the block key. A file that fails
// its checks is moved to quarantine/ and ErrCorrupt (or ErrVersion) is
// returned; an unknown key is ErrNotFound. Get marks the block most
// recently used. Reads keep working while the store stands aside. The
// returned blob is the caller's.
func (s *Store) Get(ctx context.Context, key Key) (BlockMeta, []byte, error) {
	return s.GetInto(ctx, key, nil)
}

// GetInto is Get decompressing into dst's memory when its capacity
// suffices (else into a new buffer); the blob returned is dst[:n] or the
// new buffer. It lets a caller restoring many blocks reuse one buffer.
func (s *Store) GetInto(ctx context.Context, key Key, dst []byte) (BlockMeta, []byte, error) {
	if err := s.enter(); err != nil {
		return BlockMeta{}, nil, err
	}
	defer s.leave()
	s.mu.Lock()
	e, ok := s.blocks[key]
	s.mu.Unlock()
	if !ok {
		return BlockMeta{}, nil, fmt.Errorf("%w: block %s", ErrNotFound, key)
	}
	path := s.blockPath(key)
	h, blob, err := s.readBlock(ctx, path, key, dst)
	if err != nil {
		var fe *fileError
		if errors.As(err, &fe) {
			p := s.blockProblem(e, path, fe)
			return BlockMeta{}, nil, fmt.Errorf("block %s: %w", key, p.Err)
		}
		return BlockMeta{}, nil, fmt.Errorf("block %s: %w", key, err)
	}
	s.readBytes.Add(e.size)
	now := time.Now()
	touch := false
	s.mu.Lock()
	if s.blocks[key] == e {
		s.lru.MoveToFront(e.elem)
		if e.touched.Before(s.newestTouch) { // else its mtime already ranks it newest
			e.touched, touch = now, true
			s.newestTouch = now
		}
	}
	s.mu.Unlock()
	if touch {
		os.Chtimes(path, now, now) // best effort: orders the LRU after a restart
	}
	return h.meta, blob, nil
}

// maxPooledPayload bounds the read buffers kept for reuse.
const maxPooledPayload = 64 << 20

// readBlock reads path fully and checks framing, CRCs, header, key and
// decompression, decompressing into dst when it is large enough. Check
// failures are *fileError.
func (s *Store) readBlock(ctx context.Context, path string, key Key, dst []byte) (blockHeader, []byte, error) {
	bp, _ := s.readBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	fr, err := readFrameFile(path, blockMagic, true, *bp)
	if err == nil && cap(fr.payload) <= maxPooledPayload {
		*bp = fr.payload[:0]
	}
	defer s.readBufs.Put(bp)
	if err != nil {
		return blockHeader{}, nil, err
	}
	h, err := decodeBlockHeader(fr.header, fr.payloadLen)
	if err != nil {
		return blockHeader{}, nil, err
	}
	if h.key != key {
		return blockHeader{}, nil, corruptf(KindMisnamed, "file holds block %s", h.key)
	}
	blob := dst[:0]
	if int64(cap(blob)) < h.rawLen {
		blob = make([]byte, h.rawLen)
	}
	blob = blob[:h.rawLen]
	if err := s.codec.decompress(ctx, blob, fr.payload, h.table, h.chunkRaw, h.meta.ElemBytes); err != nil {
		if ctx.Err() != nil {
			return blockHeader{}, nil, err
		}
		return blockHeader{}, nil, &fileError{kind: KindMalformed, err: err}
	}
	return h, blob, nil
}

// blockProblem handles a block file that failed a check: it drops the
// entry from the index and (unless the file is merely gone or unreadable)
// moves the file to quarantine. Missing and I/O problems leave the file.
func (s *Store) blockProblem(e *blockEntry, path string, fe *fileError) Problem {
	p := Problem{Path: path, Kind: fe.kind, Err: fe.err}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fe.kind == KindIO {
		return p // maybe transient: keep the entry, report
	}
	if s.blocks[e.key] != e {
		return p // someone else handled it
	}
	s.dropLocked(e)
	if fe.kind == KindMissing {
		s.log.Warn("block file vanished", "path", path)
		return p
	}
	p.MovedTo = s.quarantineLocked(path, fe.kind)
	s.log.Warn("block set aside", "path", path, "kind", fe.kind, "err", fe.err, "moved_to", p.MovedTo)
	return p
}

// quarantineLocked moves a file aside and counts it; "" if that failed
// (logged; the file then stays but is no longer indexed).
func (s *Store) quarantineLocked(path, kind string) string {
	dst, err := moveAside(s.root, s.quarDir, path, kind)
	if err != nil {
		s.log.Error("cannot move file to quarantine", "path", path, "err", err)
		return ""
	}
	s.setAside.Add(1)
	return dst
}

// Remove deletes the block key. A block a snapshot references is
// ErrReferenced; an unknown key is ErrNotFound.
func (s *Store) Remove(key Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	e, ok := s.blocks[key]
	if !ok {
		return fmt.Errorf("%w: block %s", ErrNotFound, key)
	}
	if n := s.refs[key]; n > 0 {
		return fmt.Errorf("%w: block %s (%d references)", ErrReferenced, key, n)
	}
	// Unlinked under the lock, so no concurrent Put of the same key can
	// have its fresh file removed by this call.
	if err := os.Remove(s.blockPath(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("coldstore: remove block %s: %w", key, err)
	}
	s.dropLocked(e)
	s.spaceFreedLocked(e.size)
	return nil
}

// Stats returns the current counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Blocks:       len(s.blocks),
		Snapshots:    len(s.snaps),
		Bytes:        s.bytes,
		RawBytes:     s.rawBytes,
		QuotaBytes:   s.cfg.QuotaBytes,
		Queued:       len(s.pending),
		Written:      s.written.Load(),
		Failed:       s.failed.Load(),
		Refused:      s.refused.Load(),
		Evicted:      s.evicted.Load(),
		SetAside:     s.setAside.Load(),
		ReadBytes:    s.readBytes.Load(),
		WrittenBytes: s.writtenBytes.Load(),
	}
	if s.fault != nil && s.clock().Before(s.fault.retryAt) {
		st.Unavailable = s.fault.cause.Error()
	}
	return st
}

// Close is CloseContext without a deadline: it waits until every queued
// block is written or has failed.
func (s *Store) Close() error { return s.CloseContext(context.Background()) }

// CloseContext stops accepting blocks, lets the workers drain the queue
// and closes the store. If ctx ends first, the blocks still queued fail
// (counted in Stats.Failed, reported to Flush) and the context's error is
// returned once the write in progress has finished. Closing twice is a
// no-op.
func (s *Store) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.queue)
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.abort.Store(true)
		<-done
		err = fmt.Errorf("coldstore: close: queue not drained: %w", ctx.Err())
	}
	s.active.Wait()
	s.codec.close()
	s.unlock()
	s.log.Info("closed", "written", s.written.Load(), "failed", s.failed.Load())
	return err
}
