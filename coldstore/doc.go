// Package coldstore is ctxd's SSD tier: KV blocks and session snapshots
// kept in files, compressed, content-addressed and crash-safe, below the
// host-RAM arena (package shm).
//
// A block is the engine's KV bytes for one token range plus its metadata
// (BlockMeta). Its Key is BlockKey(compat, chain): sha256 over the model
// digest, KV type, context settings, FormatVersion and the block's token
// hash chain, so the same tokens under the same settings always map to
// the same file and a block can never be restored under other settings.
// A Snapshot names a session: its compat settings, the caller's opaque
// manifest and metadata, and its blocks in tape order.
//
// # Files
//
// Config.Dir (mode 0700; every file 0600):
//
//	lock                      flock(LOCK_EX) while a Store is open (ErrLocked)
//	blocks/ab/<64 hex>.blk    one file per block, ab = the key's first byte
//	snapshots/<name>.snap     one file per snapshot
//	quarantine/               files that failed a check, renamed
//	                          <path with / as _>.<kind>-<UTC time>
//	*.tmp                     writes in progress; Open deletes them
//
// Every file is framed (format.go): magic ("CTXDCOLB" block, "CTXDCOLS"
// snapshot), FormatVersion, header and payload lengths, CRC32C of the
// payload, CRC32C of prefix and header. A block's header holds the key,
// chain, raw length, position, element size, class, segment, tokens,
// chunk size and chunk table; its payload is the compressed KV.
//
// Compression: the KV bytes are cut into 256 KiB chunks; each chunk is
// split into byte planes (stride = ElemBytes: byte p of every element
// goes to plane p, so the narrow exponent bytes of f16/f32 values sit
// together) and every plane is compressed as its own zstd frame
// (SpeedFastest, literal entropy coding on), or stored as is when that
// does not save 1/32 of it. Chunks are decompressed in parallel; stored
// planes are merged straight from the file buffer. The stride-2 (f16)
// shuffles use SSE2 on amd64 (planes_amd64.s, about 10× the plain Go
// loop; -tags purego selects the Go versions, the only ones elsewhere).
// MeasureThroughput times this codec on a sample.
//
// # Writes
//
// Every file is written to a temporary file in its final folder,
// fsynced, renamed into place and the folder fsynced (writeAtomic); a
// failed write removes what it made. A block is indexed only after that,
// so Has, Get and SaveSnapshot only ever see complete, durable files.
// Put writes synchronously. Enqueue hands the block to Config.Workers
// background compressors through a queue of Config.QueueBlocks; it never
// waits for the queue (a full queue is ErrQueueFull, and the caller keeps
// its block) and does no compression or I/O, only a short hold of the
// index lock. Flush waits for what was enqueued and returns the first
// failure among the blocks enqueued since the previous Flush (any
// caller's). Close drains the queue; CloseContext bounds the wait.
//
// # Open, checks and quarantine
//
// There is no index file: Open rebuilds the index by scanning blocks/ and
// snapshots/, reading each block file's framing and header (not its
// payload, unless Config.VerifyOnOpen) and each snapshot file whole.
// Truncated, corrupt, foreign (magic or name), misnamed or other-version
// files are moved to quarantine/ and listed in OpenReport.SetAside; they
// are never used and never deleted. A snapshot naming blocks that are not
// stored is kept and listed in OpenReport.Missing (LoadSnapshot returns
// ErrMissingBlock for it). Get and LoadSnapshot check the whole file
// (both CRCs) on every read, and Get also the decompressed length; a file
// that fails is moved aside and ErrCorrupt (or ErrVersion) returned.
// Verify does the same for every file. GetInto decompresses into a
// caller's buffer.
//
// # Quota and GC
//
// Stats.Bytes counts block and snapshot file bytes. With QuotaBytes > 0,
// a write that pushes the store over the quota runs GC, which removes
// least recently used blocks (Get marks a block used and touches its
// file's mtime, which orders the LRU after a restart, to the file
// system's timestamp granularity) until the files fit, never a block that
// a snapshot references. Referenced blocks alone may exceed the quota; GC
// then logs a warning. GC unlinks at most 16 files per hold of the index
// lock, so Enqueue and Get do not wait behind a long collection.
//
// # Disk faults
//
// ENOSPC, EDQUOT, EIO or EROFS on a write make the store stand aside:
// the write fails (Put's caller gets the error, an enqueued block is
// counted in Stats.Failed, logged and returned by Flush), Err and
// Stats.Unavailable report the cause, and Put, Enqueue and SaveSnapshot
// return a wrapped ErrUnavailable without touching the disk until
// Config.RetryAfter has passed, or until GC, Remove or DeleteSnapshot
// freed space after ENOSPC. The next write then probes the disk. Reads
// (Get, LoadSnapshot, Snapshots) keep working throughout.
//
// # Invariants
//
//	I1  Every indexed block has a complete file whose header names its
//	    key; every indexed snapshot a complete file naming itself.
//	I2  A file that fails a check is never returned: it is reported and
//	    moved to quarantine/ (or, if it vanished, dropped from the index).
//	I3  A block referenced by an indexed snapshot is never removed by GC
//	    or Remove (ErrReferenced); SaveSnapshot succeeds only when all
//	    its blocks are indexed.
//	I4  A SaveSnapshot or Put that returned nil survives a crash (kill or
//	    power loss on a disk honouring fsync); one that did not return
//	    leaves either the old state or the new, never a torn file.
//	I5  Nothing accepted is lost silently: every block passed to Put or
//	    accepted by Enqueue is written, or its failure is returned to the
//	    caller (Put, Flush) and counted in Stats.Failed.
//	I6  Stats.Bytes = Σ indexed block file sizes + Σ snapshot file sizes.
//
// The crash test kills a child process that writes blocks and snapshots
// at random moments (SIGKILL) for dozens of rounds and checks I1, I2 and
// I4 after each reopen.
//
// Concurrency: a Store is safe for concurrent use; one mutex guards the
// index, file I/O and (de)compression run outside it, except unlinks and
// renames into quarantine, which hold it so no concurrent write of the
// same key can be undone. One Store opens a folder at a time.
//
// Source files: store.go (Config, Open, Put, Get, Remove, Close), key.go
// (block keys and FormatVersion), format.go (file framing), codec.go
// (chunked zstd), planes.go, planes_amd64.go, planes_amd64.s and
// planes_other.go (byte planes), queue.go (background compression),
// snapshot.go (saving, loading and pinning snapshots), load.go (rebuilding
// the index at Open), gc.go (quota collection, pins), verify.go (Verify),
// fs.go (the system-call seam tests inject faults through), errors.go
// (sentinel errors).
package coldstore
