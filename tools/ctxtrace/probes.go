package ctxtrace

import "github.com/ctxd/ctxd/tools/ctxtrace/hist"

// Marker symbols in ctxd's executable (sidecar/trace.go); Go's register
// ABI passes (phase int, block uint64) in RAX and RBX.
const (
	symPhaseBegin = "github.com/ctxd/ctxd/sidecar.fetchPhaseBegin"
	symPhaseEnd   = "github.com/ctxd/ctxd/sidecar.fetchPhaseEnd"
)

// Fetch phase numbers: the markers' first argument (sidecar/trace.go).
const (
	PhaseArenaLookup  = 1
	PhaseDecompress   = 2
	PhaseEngineInsert = 3
)

// numProbes and numBuckets mirror NPROBES and NBUCKETS in the C source.
const (
	numProbes  = 16
	NumBuckets = hist.NumBuckets
)

// probe describes one eBPF histogram.
type probe struct {
	name string
	what string
}

// probeTable lists the probes by number (the enum in bpf/ctxtrace.bpf.c).
// Phase probes are 10 + phase − 1; numbers 13..15 are unused.
func probeTable() [numProbes]probe {
	return [numProbes]probe{
		0:  {"read", "read(2) latency"},
		1:  {"write", "write(2) latency"},
		2:  {"pread64", "pread64(2) latency"},
		3:  {"pwrite64", "pwrite64(2) latency"},
		4:  {"fsync", "fsync(2) latency"},
		5:  {"fdatasync", "fdatasync(2) latency"},
		6:  {"block_rq", "block request issue→complete, issued by the target's threads"},
		7:  {"block_rq_all", "block request issue→complete, every process"},
		8:  {"page_fault.arena_read", "read faults inside the arena; value: time since the previous arena fault"},
		9:  {"page_fault.arena_write", "write faults inside the arena; value: time since the previous arena fault"},
		10: {"fetch_phase.arena_lookup", "fetch phase 1: reading a parked block's KV from the arena"},
		11: {"fetch_phase.decompress", "fetch phase 2: decompressing a block read from the SSD tier"},
		12: {"fetch_phase.engine_insert", "fetch phase 3: inserting the KV into the engine"},
	}
}
