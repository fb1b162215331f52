//go:build linux && amd64

package ctxtrace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Tracer holds the loaded probes of one traced process. Close detaches
// them.
type Tracer struct {
	pid     int
	objs    probesObjects
	links   []link.Link
	skipped []string
	stats   io.Closer // BPF run-time statistics, while enabled
}

// Target names the process to trace.
type Target struct {
	PID int
	// Executable is the file the fetch-phase uprobes go into; "" means
	// /proc/PID/exe.
	Executable string
}

// Attach loads the probes for t.PID and attaches them. Probe groups that
// cannot attach (tracefs missing, a stripped executable) are listed by
// Skipped; Attach fails only when nothing could be attached. Lacking
// privileges it returns a *PrivilegeError (errors.Is ErrNoPrivileges).
func Attach(t Target) (*Tracer, error) {
	if t.PID <= 0 {
		return nil, fmt.Errorf("ctxtrace: bad pid %d", t.PID)
	}
	exe := t.Executable
	if exe == "" {
		exe = "/proc/" + strconv.Itoa(t.PID) + "/exe"
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; raising it
	// needs CAP_SYS_RESOURCE and is harmless to fail on newer kernels.
	_ = rlimit.RemoveMemlock()
	spec, err := loadProbes()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[probesVarTargetTgid].Set(uint32(t.PID)); err != nil {
		return nil, fmt.Errorf("ctxtrace: setting the target pid: %w", err)
	}
	tr := &Tracer{pid: t.PID}
	if err := spec.LoadAndAssign(&tr.objs, nil); err != nil {
		if permissionError(err) {
			return nil, &PrivilegeError{Missing: nonEmpty(Preflight(""), "the kernel refused to load BPF programs"), Err: err}
		}
		return nil, fmt.Errorf("ctxtrace: loading the probes: %w", err)
	}
	var denied []error
	group := func(name string, attach func() error) {
		if err := attach(); err != nil {
			if permissionError(err) {
				denied = append(denied, err)
			}
			tr.skipped = append(tr.skipped, fmt.Sprintf("%s: %v", name, err))
		}
	}
	group("syscalls (raw tracepoints sys_enter/sys_exit)", func() error {
		return tr.attachAll(
			func() (link.Link, error) {
				return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_enter", Program: tr.objs.SysEnter})
			},
			func() (link.Link, error) {
				return link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sys_exit", Program: tr.objs.SysExit})
			})
	})
	tracefs := func() error {
		if !TracefsMounted() {
			return errors.New("tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing")
		}
		return nil
	}
	group("block requests (tracepoints block:block_rq_issue/complete)", func() error {
		if err := tracefs(); err != nil {
			return err
		}
		return tr.attachAll(
			func() (link.Link, error) {
				return link.Tracepoint("block", "block_rq_issue", tr.objs.BlockRqIssue, nil)
			},
			func() (link.Link, error) {
				return link.Tracepoint("block", "block_rq_complete", tr.objs.BlockRqComplete, nil)
			})
	})
	group("arena page faults (tracepoint exceptions:page_fault_user)", func() error {
		if err := tracefs(); err != nil {
			return err
		}
		return tr.attachAll(func() (link.Link, error) {
			return link.Tracepoint("exceptions", "page_fault_user", tr.objs.PageFaultUser, nil)
		})
	})
	group("fetch phases (uprobes on sidecar.fetchPhaseBegin/End)", func() error {
		ex, err := link.OpenExecutable(exe)
		if err != nil {
			return err
		}
		up := func(sym string, prog *ebpf.Program) func() (link.Link, error) {
			return func() (link.Link, error) {
				code, err := symbolCode(exe, sym)
				if err != nil {
					return nil, err
				}
				return ex.Uprobe(sym, prog, &link.UprobeOptions{PID: t.PID, Offset: entryOffset(code)})
			}
		}
		return tr.attachAll(up(symPhaseBegin, tr.objs.FetchPhaseBegin), up(symPhaseEnd, tr.objs.FetchPhaseEnd))
	})
	// Count the probes' own run time (kernel.bpf_stats_enabled while we
	// hold it); without CAP_SYS_ADMIN the report just lacks probe_cpu.
	if st, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME)); err == nil {
		tr.stats = st
	}
	if len(tr.links) == 0 {
		tr.Close()
		if len(denied) > 0 {
			return nil, &PrivilegeError{Missing: nonEmpty(Preflight(exe), "the kernel refused to attach the probes"), Err: denied[0]}
		}
		return nil, fmt.Errorf("ctxtrace: no probe attached: %v", tr.skipped)
	}
	return tr, nil
}

// attachAll attaches every link or none.
func (tr *Tracer) attachAll(attach ...func() (link.Link, error)) error {
	var got []link.Link
	for _, a := range attach {
		l, err := a()
		if err != nil {
			for _, g := range got {
				g.Close()
			}
			return err
		}
		got = append(got, l)
	}
	tr.links = append(tr.links, got...)
	return nil
}

func permissionError(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, os.ErrPermission)
}

func nonEmpty(list []string, otherwise string) []string {
	if len(list) == 0 {
		return []string{otherwise}
	}
	return list
}

// Skipped lists the probe groups that did not attach, with the reason.
func (tr *Tracer) Skipped() []string { return tr.skipped }

// SetArenaRanges tells the page-fault probe where the arena is mapped
// (at most 32 ranges; more are ignored, and said so).
func (tr *Tracer) SetArenaRanges(rs []Range) error {
	var err error
	if len(rs) > maxRanges {
		err = fmt.Errorf("ctxtrace: %d arena ranges, the probe watches the first %d", len(rs), maxRanges)
		rs = rs[:maxRanges]
	}
	for i := uint32(0); i < maxRanges; i++ {
		v := probesRange{}
		if int(i) < len(rs) {
			v.Start, v.End = rs[i].Start, rs[i].End
		}
		if e := tr.objs.ArenaRanges.Update(i, v, ebpf.UpdateAny); e != nil {
			return fmt.Errorf("ctxtrace: arena ranges: %w", e)
		}
	}
	return err
}

// Snapshot reads every probe's histogram (cumulative since Attach).
func (tr *Tracer) Snapshot() ([]Hist, error) {
	table := probeTable()
	var hs [numProbes]Hist
	var perCPU []uint64
	for p := uint32(0); p < numProbes; p++ {
		hs[p].Name, hs[p].What = table[p].name, table[p].what
		if err := tr.objs.SumNs.Lookup(p, &perCPU); err != nil {
			return nil, fmt.Errorf("ctxtrace: reading sums: %w", err)
		}
		for _, v := range perCPU {
			hs[p].SumNs += float64(v)
		}
	}
	var key uint32
	it := tr.objs.Hist.Iterate()
	for it.Next(&key, &perCPU) {
		p, k := key/NumBuckets, key%NumBuckets
		if p >= numProbes {
			continue
		}
		for _, v := range perCPU {
			hs[p].Buckets[k] += v
			hs[p].Count += v
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("ctxtrace: reading histograms: %w", err)
	}
	out := make([]Hist, 0, numProbes)
	for p, h := range hs {
		if table[p].name != "" {
			out = append(out, h)
		}
	}
	return out, nil
}

// ProbeCPU reads the kernel's account of the probes' run time; nil when
// BPF statistics could not be enabled.
func (tr *Tracer) ProbeCPU() *ProbeCPU {
	if tr.stats == nil {
		return nil
	}
	out := &ProbeCPU{Programs: map[string]ProgramCPU{}}
	progs := map[string]*ebpf.Program{
		probesProgSysEnter: tr.objs.SysEnter, probesProgSysExit: tr.objs.SysExit,
		probesProgBlockRqIssue: tr.objs.BlockRqIssue, probesProgBlockRqComplete: tr.objs.BlockRqComplete,
		probesProgPageFaultUser:   tr.objs.PageFaultUser,
		probesProgFetchPhaseBegin: tr.objs.FetchPhaseBegin, probesProgFetchPhaseEnd: tr.objs.FetchPhaseEnd,
	}
	for name, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return nil
		}
		out.Programs[name] = ProgramCPU{Runs: st.RunCount, RunTimeNs: uint64(st.Runtime.Nanoseconds())}
		out.Runs += st.RunCount
		out.RunTimeNs += uint64(st.Runtime.Nanoseconds())
	}
	return out
}

// Close detaches and unloads the probes.
func (tr *Tracer) Close() error {
	var errs []error
	if tr.stats != nil {
		errs = append(errs, tr.stats.Close())
		tr.stats = nil
	}
	for _, l := range tr.links {
		errs = append(errs, l.Close())
	}
	tr.links = nil
	errs = append(errs, tr.objs.Close())
	return errors.Join(errs...)
}
