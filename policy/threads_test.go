package policy

import (
	"strings"
	"testing"
)

func TestComputeThreads(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     ComputeThreadsInput
		want   int
		reason string
	}{
		{"idle two cores", ComputeThreadsInput{CPUs: 2, Measured: true}, 2, "2 of 2 CPUs: auto, idle"},
		{"a VM's housekeeping", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 0.08}, 2, "idle (other processes want 0.08 cores)"},
		{"a compile's blinks", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 0.45}, 2, "idle"},
		{"a busy loop beside ctxd's two threads", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 0.67}, 1, "1 held by other processes"},
		{"a busy loop beside ctxd's one thread", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 1}, 1, "1 held"},
		{"a two-job compile: never zero", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 2}, 1, "2 held"},
		{"more demand than cores", ComputeThreadsInput{CPUs: 2, Measured: true, Others: 7}, 1, "2 held"},
		{"sixteen cores, three and a half busy", ComputeThreadsInput{CPUs: 16, Measured: true, Others: 3.5}, 12, "12 of 16"},
		{"negative noise", ComputeThreadsInput{CPUs: 4, Measured: true, Others: -0.3}, 4, "idle"},
		{"small model decode", ComputeThreadsInput{CPUs: 16, Max: 1, Measured: true}, 1, "at most 1 for this step"},
		{"max above the CPUs", ComputeThreadsInput{CPUs: 4, Max: 8, Measured: true}, 4, "4 of 4"},
		{"unreadable load", ComputeThreadsInput{CPUs: 4, Max: 3}, 3, "unreadable"},
		{"pinned", ComputeThreadsInput{CPUs: 16, Pinned: 4, Measured: true, Others: 15}, 4, "pinned by --threads"},
		{"pinned above the CPUs", ComputeThreadsInput{CPUs: 2, Pinned: 8}, 2, "capped at the 2 CPUs"},
		{"pinned small model decode stays pinned", ComputeThreadsInput{CPUs: 4, Pinned: 3, Max: 1}, 3, "pinned"},
		{"offloaded", ComputeThreadsInput{CPUs: 16, Offloaded: true, Measured: true}, 1, "GPU"},
		{"offloaded beats pinned", ComputeThreadsInput{CPUs: 16, Pinned: 8, Offloaded: true}, 1, "GPU"},
		{"no CPUs reported", ComputeThreadsInput{CPUs: 0, Measured: true}, 1, "1 of 1"},
	} {
		got := ComputeThreads(c.in)
		if got.Threads != c.want || !strings.Contains(got.Reason, c.reason) {
			t.Errorf("%s: ComputeThreads(%+v) = %+v, want %d threads and a reason with %q", c.name, c.in, got, c.want, c.reason)
		}
	}
}
