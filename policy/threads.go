package policy

import (
	"fmt"
	"math"
)

// ThreadsAuto is the --threads value that adapts each decode call's CPU
// threads to the cores other processes leave free; any other value pins
// the count.
const ThreadsAuto = 0

// ComputeThreadsInput is what ComputeThreads decides from.
type ComputeThreadsInput struct {
	CPUs int // CPUs this process may run on
	// Pinned is the count --threads fixed (ThreadsAuto: adapt to the load).
	Pinned int
	// Max is the most an adaptive call may use (0: CPUs); single-token
	// steps of a small model use one (DecodeThreads).
	Max int
	// Others is the CPU demand of other processes, in cores: the CPU time
	// they used over the last interval per second of it (measured from
	// /proc/stat less this process's own time, so ctxd's threads never
	// count), or, after an idle spell, the threads of other processes
	// runnable at that instant. Steal time (a VM's host) and processes
	// that lowered their priority (nice) are not demand: the former is
	// not in this machine's cores, the latter yield to ctxd.
	Others float64
	// Measured is false when the load could not be read (no /proc).
	Measured bool
	// Offloaded is true when every layer and the output head run on a
	// GPU: the CPU only feeds the device.
	Offloaded bool
}

// ThreadsDecision is ComputeThreads' answer with the reason status shows.
type ThreadsDecision struct {
	Threads int
	Reason  string
}

// busyShare is the demand, in cores, from which another process takes a
// core away from ctxd: a process busy on one core still gets N/(N+1) of a
// core while ctxd runs N threads on N cores (2/3 on two), and a compile's
// idle blinks or a VM's housekeeping stay well under half.
const busyShare = 0.5

// ComputeThreads picks the ggml threads for one decode call. ggml's
// threads meet at a spinning barrier after every operation, so a thread
// that loses its core to another process stalls all the others until the
// scheduler gives it back: with one busy process on one of two cores, two
// threads ran a replay 4× slower than one (21.8 s vs 5.2 s). Each core's
// worth of other processes' demand (rounded, from busyShare up) therefore
// takes one core out of the count; at least one thread always runs. On an
// idle machine every CPU (up to Max) computes. A pinned count is used as
// given (up to the CPUs); a fully offloaded model needs one thread.
func ComputeThreads(in ComputeThreadsInput) ThreadsDecision {
	cpus := max(in.CPUs, 1)
	if in.Offloaded {
		return ThreadsDecision{1, "1: every layer runs on the GPU"}
	}
	if in.Pinned > 0 {
		if in.Pinned > cpus {
			return ThreadsDecision{cpus, fmt.Sprintf("%d: --threads %d, capped at the %d CPUs", cpus, in.Pinned, cpus)}
		}
		return ThreadsDecision{in.Pinned, fmt.Sprintf("%d: pinned by --threads", in.Pinned)}
	}
	limit := cpus
	if in.Max > 0 {
		limit = min(in.Max, cpus)
	}
	if !in.Measured {
		return ThreadsDecision{limit, fmt.Sprintf("%d of %d CPUs: auto, the load is unreadable here", limit, cpus)}
	}
	others := max(in.Others, 0)
	taken := int(math.Floor(others + 1 - busyShare))
	t := max(min(limit, cpus-taken), 1)
	why := "idle"
	if taken > 0 {
		why = fmt.Sprintf("%d held by other processes", min(taken, cpus))
	}
	if limit < cpus && t == limit {
		why = fmt.Sprintf("at most %d for this step", limit)
	}
	return ThreadsDecision{t, fmt.Sprintf("%d of %d CPUs: auto, %s (other processes want %.2f cores)", t, cpus, why, others)}
}
