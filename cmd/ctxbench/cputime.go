package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// processCPU is the CPU time all threads of process pid ("self" for this
// one) have run, from the scheduler's nanosecond counters
// (/proc/PID/task/TID/schedstat). Unlike wall time it does not grow
// while other processes hold the cores, so small per-token costs can be
// measured on a busy machine. Threads that exited are not counted:
// measure across calls that keep their threads.
func processCPU(pid string) (time.Duration, error) {
	dir := "/proc/" + pid + "/task"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/schedstat")
		if err != nil {
			continue // exited meanwhile
		}
		f := bytes.Fields(b)
		if len(f) < 1 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, e.Name())
		}
		ns, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, e.Name(), err)
		}
		total += ns
	}
	return time.Duration(total), nil
}

// cpuMeter sums the CPU time of two processes over measured spans and
// keeps each span's.
type cpuMeter struct {
	pids  [2]string
	sum   [2]time.Duration
	spans [2][]time.Duration
	start [2]time.Duration
	err   error
}

func (m *cpuMeter) begin() {
	for i, p := range m.pids {
		t, err := processCPU(p)
		if err != nil && m.err == nil {
			m.err = err
		}
		m.start[i] = t
	}
}

func (m *cpuMeter) end() {
	for i, p := range m.pids {
		t, err := processCPU(p)
		if err != nil && m.err == nil {
			m.err = err
		}
		m.sum[i] += t - m.start[i]
		m.spans[i] = append(m.spans[i], t-m.start[i])
	}
}

// pairedMedian is the median over spans of a's span less b's (process i),
// per unit of n: spans measured in pairs (a's k-th beside b's k-th), so
// one call's outlier (a collection, a call that ran on another thread
// count) moves it less than the difference of the sums.
func pairedMedian(a, b *cpuMeter, i int, n float64) float64 {
	k := min(len(a.spans[i]), len(b.spans[i]))
	if k == 0 {
		return 0
	}
	d := make([]float64, k)
	for j := range k {
		d[j] = float64(a.spans[i][j]-b.spans[i][j]) / n
	}
	return median(d)
}
