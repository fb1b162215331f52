package llama

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// cpuLoad measures the CPU demand of processes other than this one, for
// policy.ComputeThreads. Between two samples at most loadStale apart it is
// the CPU time the machine spent busy less this process's own (both from
// /proc, in the kernel's ticks) per tick of wall time: ctxd's threads,
// spinning or computing, never count, nor does steal time (a VM's host)
// nor the time of processes that lowered their priority (nice; unless
// ctxd runs niced itself). After a longer gap (an idle daemon's first
// call) the average would dilute a competitor that just started, so the
// sample is the instant's runnable threads of other processes: the
// kernel's procs_running less this process's threads in state R, the
// least of three reads, which drops a kernel worker's blink. Samples
// closer than loadEvery reuse the last answer, so a fast decode loop reads
// /proc a few times a second at most.
type cpuLoad struct {
	read     func() (cpuTimes, bool) // nil: readCPUTimes
	ownRun   func() (int, bool)      // nil: ownRunnable
	prev     cpuTimes
	prevAt   time.Time
	others   float64
	measured bool
}

const (
	loadEvery = 250 * time.Millisecond
	loadStale = 2 * time.Second
)

// cpuTimes is one read of /proc/stat and /proc/self/stat.
type cpuTimes struct {
	busy    uint64 // ticks all CPUs spent in user, system, irq and softirq (and nice when selfNice)
	total   uint64 // ticks all CPUs spent in anything, steal included
	self    uint64 // this process's user and system ticks, every thread's
	cpus    int    // cpuN lines
	running int    // procs_running: runnable threads now, the reader included
}

// sample returns the other processes' demand in cores and whether it
// could be measured.
func (l *cpuLoad) sample(now time.Time) (float64, bool) {
	if !l.prevAt.IsZero() && now.Sub(l.prevAt) < loadEvery {
		return l.others, l.measured
	}
	read, ownRun := l.read, l.ownRun
	if read == nil {
		read = readCPUTimes
	}
	if ownRun == nil {
		ownRun = ownRunnable
	}
	t, ok := read()
	if !ok {
		l.prevAt, l.others, l.measured = now, 0, false
		return 0, false
	}
	switch {
	case !l.prevAt.IsZero() && now.Sub(l.prevAt) <= loadStale && t.total > l.prev.total && t.cpus > 0:
		busy := float64(t.busy-min(l.prev.busy, t.busy)) - float64(t.self-min(l.prev.self, t.self))
		l.others = max(busy, 0) / float64(t.total-l.prev.total) * float64(t.cpus)
		l.measured = true
	default:
		l.others, l.measured = instantOthers(t, read, ownRun)
	}
	l.prev, l.prevAt = t, now
	return l.others, l.measured
}

// instantOthers is the least, over three reads, of the runnable threads
// that are not this process's.
func instantOthers(first cpuTimes, read func() (cpuTimes, bool), ownRun func() (int, bool)) (float64, bool) {
	least := -1
	for i := range 3 {
		t := first
		if i > 0 {
			var ok bool
			if t, ok = read(); !ok {
				break
			}
		}
		own, ok := ownRun()
		if !ok {
			return 0, false
		}
		n := max(t.running-own, 0)
		if least < 0 || n < least {
			least = n
		}
	}
	return float64(max(least, 0)), least >= 0
}

// readCPUTimes reads /proc/stat and /proc/self/stat.
func readCPUTimes() (cpuTimes, bool) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	ticks, nice, ok := parseSelfStat(self)
	if !ok {
		return cpuTimes{}, false
	}
	t, ok := parseProcStat(stat, nice > 0)
	t.self = ticks
	return t, ok
}

// parseProcStat reads the aggregate cpu line, the cpuN lines and
// procs_running of /proc/stat.
func parseProcStat(b []byte, countNice bool) (cpuTimes, bool) {
	var t cpuTimes
	seenCPU, seenRun := false, false
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch name := string(f[0]); {
		case name == "cpu":
			// user nice system idle iowait irq softirq steal [guest guest_nice]:
			// guest time is already inside user.
			if len(f) < 9 {
				return t, false
			}
			var v [8]uint64
			for i := range v {
				n, err := strconv.ParseUint(string(f[i+1]), 10, 64)
				if err != nil {
					return t, false
				}
				v[i] = n
				t.total += n
			}
			t.busy = v[0] + v[2] + v[5] + v[6]
			if countNice {
				t.busy += v[1]
			}
			seenCPU = true
		case len(name) > 3 && name[:3] == "cpu":
			t.cpus++
		case name == "procs_running" && len(f) == 2:
			n, err := strconv.Atoi(string(f[1]))
			if err != nil {
				return t, false
			}
			t.running, seenRun = n, true
		}
	}
	return t, seenCPU && seenRun && t.cpus > 0
}

// parseSelfStat returns utime+stime and the nice value of a
// /proc/PID/stat line (fields 14, 15 and 19, counted after the command
// name, which may hold spaces and parentheses).
func parseSelfStat(b []byte) (ticks uint64, nice int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, the state
	if len(f) < 17 {
		return 0, 0, false
	}
	u, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	n, err3 := strconv.Atoi(string(f[16]))
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, false
	}
	return u + s, n, true
}

// ownRunnable counts this process's threads in state R (running or
// waiting for a CPU).
func ownRunnable() (int, bool) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, false
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		if threadState(b) == 'R' {
			n++
		}
	}
	return n, true
}

// threadState is the state letter of a /proc/PID/task/TID/stat line.
func threadState(b []byte) byte {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
