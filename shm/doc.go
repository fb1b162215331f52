// Package shm is ctxd's host-RAM block arena: where a session's KV cache is
// parked, as blocks, while the inference engine holds only a bounded hot
// set. A block is one token range of a session — its tokens, the chain hash
// over every token up to its end, its segment, the position it was
// extracted at and the engine's opaque KV bytes for it. Blocks live in
// fixed-size slabs of shared-memory region files (mmap'd read-write,
// MAP_SHARED), so they survive the death of the ctxd process: a restarted
// ctxd re-attaches the arena with Open and serves every block that was
// committed, without recomputing anything.
//
// # Files
//
// The caller passes a folder (e.g. $XDG_RUNTIME_DIR/ctxd/shm, tmpfs, or
// DATA_DIR/shm); Open makes it mode 0700 and every file in it mode 0600:
//
//	.                    the folder is flock(LOCK_EX)ed while an Arena is open (ErrLocked)
//	arena.shm            superblock, 4 KiB
//	region-000000.shm    region files, added as blocks need room
//	quarantine/          files Open refused, renamed <name>.<corrupt|foreign>-<UTC time>
//
// Superblock: magic "CTXDSHMA", format version, geometry (slab bytes, slabs
// per region, metadata bytes of a region), a random arena id, creation
// time, SHA-256 of Options.Compat (and its first 256 bytes for messages),
// a CRC32C over all of that, and — outside the CRC, 8-byte aligned, stored
// atomically — the generation.
//
// Region file: a 4 KiB header (magic "CTXDSHMR", version, region number,
// arena id, geometry, its slab count, CRC32C); the entry table, one 64-byte
// slot per slab; the next table, one uint32 per slab; then, page aligned,
// the slabs. Slab i of region r has the global number r·slabsPerRegion+i.
//
// Blocks and slabs. A block is stored as one stream — a 160-byte block
// header (magic, id, session, chain hash, class, kind, segment id, position,
// token count, KV length), the tokens as little-endian int32, the KV bytes —
// cut into slab-sized pieces. The pieces sit in a chain of slabs linked
// through the next table (the last links to 0xFFFFFFFF); chains may cross
// regions, so every free slab is usable and Put fails with ErrArenaFull
// exactly when free slabs plus what the budget may still add fall short —
// there is no fragmentation. Slabs are allocated lowest first, so a block
// put into free space is usually one contiguous run. The entry slot of a
// block is the slot of its first slab and holds: id, generation, first
// slab, slab count, stream length, the CRC32C of the stream, and the CRC32C
// of the entry itself. Its generation word, written last and atomically,
// commits it: zero means the slot is empty.
//
// The free list is not stored: it is a bitmap per region rebuilt by Open as
// "every slab no valid chain uses".
//
// Budget. Options.BudgetBytes bounds the size of all files (superblock +
// regions). Region files are added (sized with fallocate, so writes through
// the mapping cannot fail later) while the budget allows, the last one
// shorter if need be; empty regions are removed while the files exceed a
// budget that shrank between opens, and empty short regions are remade
// full after it grew.
//
// # Write order and crashes
//
// Put: (1) allocate free slabs, write their chain links and the stream;
// (2) write the entry's fields and CRCs, then store its generation word
// (= generation + 1) — the commit; (3) for a replacing Put, clear the old
// entry; (4) store generation + 1 in the superblock. Delete bumps the
// generation, clears the entry (generation word first), then frees the
// slabs, so that across any crash an index change always comes with a
// larger generation. Slabs are only ever written while free, i.e. while no
// committed entry covers them. A process killed between any two
// instructions leaves every committed block intact (a MAP_SHARED page is
// in the page cache the moment it is written) and at most one uncommitted
// entry, which Open clears; a kill between steps 2 and 4 is repaired by
// Open taking the generation from the newest entry. After a power loss on a disk-backed folder pages may have been
// written back in any order; a committed entry whose stream did not make it
// fails the stream CRC and is dropped — a torn write never reads as valid.
// Options.Sync msyncs the data before the commit and the entry after it,
// for durability across power loss as well.
//
// The crash test kills a child process with SIGKILL at each of these
// steps and at random moments, and checks that every Put that returned
// is there bit-exact.
//
// Open checks the superblock (bad magic, CRC or size: ErrCorrupt; other
// format version or compat key: ErrForeign) — on failure the whole arena is
// set aside and a fresh one made — then each region header (a bad one is
// set aside: the blocks whose entries it held go with it, blocks elsewhere
// whose chains reach into it are dropped), then every committed entry, newest
// generation first: entry CRC, a chain of the right length inside the
// arena not shared with a newer entry, the block header, the stream CRC.
// Entries that fail are cleared and reported in Report.Dropped; of two
// entries with the same id (a replacing Put killed between steps 2 and 3)
// the newer wins. The generation becomes the largest seen, plus one if
// Open changed anything.
//
// Reads (Get, ReadKV, ViewKV) verify the stream CRC every time, in the
// same pass as the copy; a block that fails is dropped and ErrCorrupt
// returned.
//
// # Invariants
//
// Check verifies each of these (it reads every block):
//
//	I1  The superblock has the magic, this FormatVersion, a valid CRC, sane
//	    geometry and the hash of this Arena's compat key; its generation
//	    equals the in-memory generation G.
//	I2  Each region file has a valid header naming this arena, its own
//	    number and the superblock's geometry, and is exactly
//	    meta + slabs·slabBytes long; the region list has no trailing hole.
//	I3  The committed entries and the in-memory index are the same set:
//	    every indexed block has a committed entry in the slot of its first
//	    slab, with a valid entry CRC and the same id, generation, first
//	    slab, slab count, length and stream CRC; every committed slot is
//	    indexed; every empty slot (generation 0) is all zero; the
//	    chain-hash map lists exactly the indexed blocks under their hashes.
//	I4  Every block's chain has ⌈length/slabBytes⌉ slabs, all inside
//	    existing regions, each linking to the next and the last to
//	    0xFFFFFFFF; length = 160 + 4·tokens + KV bytes.
//	I5  Every block's generation g satisfies 0 < g ≤ G, and no two blocks
//	    share a generation (each Put takes a fresh one).
//	I6  The chains are pairwise disjoint, the free bitmaps and the chains
//	    partition the slabs of every region exactly (no slab both free and
//	    used, none leaked), and the free/used/payload/KV counters match.
//	I7  Every block's stored header matches its metadata and its stream
//	    matches the CRC32C in its entry.
//	I8  The files fit the budget, unless the budget shrank under live
//	    blocks (then no region is empty); no empty region is shorter than
//	    the budget would make it now.
//
// Concurrency: an Arena is safe for concurrent use (one RWMutex; reads
// share it, mutations take it). One process attaches an arena at a time.
//
// Source files: arena.go (Arena: Put, Get, Delete, Options), open.go (Open
// and re-attaching), format.go (the superblock, region and index layout),
// files.go (the folder, its lock and the region files), check.go (Check,
// every invariant above).
package shm
