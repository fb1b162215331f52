package main

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestBenchSpeedBesideBusy: one round alone and beside a busy process
// prints both, the ratios and their median, and leaves no busy process
// behind; --threads pins the count the daemons report.
func TestBenchSpeedBesideBusy(t *testing.T) {
	model := testmodel.Stories(t)
	code, out, errs := ctl(t, "bench", "speed", "--model", model, "--prompt", "64", "--generate", "4", "--warm", "16", "--threads", "1", "--beside-busy", "1")
	if code != 0 {
		t.Fatalf("bench speed --beside-busy: %d %s", code, errs)
	}
	for _, want := range []string{"round 1: alone 1 threads", "beside a busy process 1 threads", "warm turn", "median of 1 rounds, busy/alone"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The busy loop was killed and reaped: no child of ours runs it.
	if pids := busyChildren(t); len(pids) > 0 {
		t.Fatalf("busy loop still running: %v", pids)
	}
	if code, _, _ := ctl(t, "bench", "speed", "--threads", "-1"); code != 2 {
		t.Fatalf("--threads -1: exit %d, want 2 (usage)", code)
	}
}

// busyChildren are the pids of this process's children whose command
// line holds the busy loop.
func busyChildren(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range ents {
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat)[i+1:]) // f[1] is the parent's pid
		if i < 0 || len(f) < 2 || f[1] != self {
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.Contains(string(cmd), "while :") {
			out = append(out, e.Name())
		}
	}
	return out
}
