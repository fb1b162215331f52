package llama

import (
	"bytes"
	"math"
	"os"
	"strconv"
	"time"
)

// cpuLoad estimates how many runnable threads besides the caller compete
// for the CPUs, from the kernel's instantaneous count in /proc/loadavg
// ("1.00 0.50 0.25 3/412 9876": 3 runnable, the reader included). Samples
// rise at once and decay over a second, so a load that blinks on and off
// (a compile's jobs between files) still counts.
type cpuLoad struct {
	others float64
	at     time.Time
}

// loadDecay is how fast a sample of competing threads fades.
const loadDecay = time.Second

// sample reads the count and returns the smoothed number of competitors.
func (l *cpuLoad) sample(now time.Time) float64 {
	n, ok := runnableThreads()
	if !ok {
		return l.others
	}
	s := float64(max(n-1, 0)) // the thread reading is the caller
	decayed := l.others * math.Exp(-float64(now.Sub(l.at))/float64(loadDecay))
	l.others, l.at = max(s, decayed), now
	return l.others
}

// runnableThreads is the fourth field's numerator of /proc/loadavg.
func runnableThreads() (int, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b)
	if len(f) < 4 {
		return 0, false
	}
	run, _, ok := bytes.Cut(f[3], []byte("/"))
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(string(run))
	return n, err == nil
}
