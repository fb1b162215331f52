// Package ctxtrace measures where ctxd spends its time, from outside the
// daemon: eBPF probes (github.com/cilium/ebpf; C source in bpf/, compiled
// by bpf2go and committed) keep log2 latency histograms of one process —
//
//   - its read, write, pread64, pwrite64, fsync and fdatasync system calls
//     (raw tracepoints sys_enter/sys_exit, filtered by process);
//   - block requests from issue to completion (tracepoints
//     block_rq_issue/block_rq_complete, keyed by device and sector):
//     those issued by the process's threads, and all of the machine's;
//   - user page faults inside the host-RAM arena's mappings (tracepoint
//     exceptions:page_fault_user; the address ranges come from ctxd's
//     Metrics call or /proc/PID/maps), valued by the time since the
//     previous one since the kernel has no fault-exit event;
//   - the phases of a block fetch (arena lookup, decompression, engine
//     insert), through uprobes at the entries of ctxd's empty marker
//     functions sidecar.fetchPhaseBegin/End (see sidecar/trace.go) —
//     after any stack-check prologue, never uretprobes, which crash Go.
//
// Without the privileges the probes need (CAP_BPF and CAP_PERFMON, or
// CAP_SYS_ADMIN; tracefs mounted for the tracepoints), Run says exactly
// what is missing and falls back to ctxd's own Go-side timings read over
// its socket.
//
// Invariants: histograms are log2 buckets of nanoseconds — bucket k counts
// values v with 2^k <= v < 2^(k+1) (bucket 0 also holds 0) — on both
// paths, so reports from eBPF and from the fallback read alike; probe
// numbers in bpf/ctxtrace.bpf.c match probeTable; the tracer never writes
// to the traced process.
//
// Files: run.go (Options and Run: trace, or fall back to the Go side),
// tracer_linux_amd64.go and tracer_other.go (loading and attaching the
// probes), probes.go (marker symbols and the probe table), entry.go (uprobe
// entry addresses of Go functions), ranges.go (the arena's address ranges),
// privileges.go (which capabilities are missing), report.go (what a trace
// measured), hist_alias.go (the histogram types of package hist), gen.go and
// probes_x86_bpfel.go (the bpf2go-generated object and bindings; C source in
// bpf/).
package ctxtrace
