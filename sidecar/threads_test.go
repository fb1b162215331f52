package sidecar

import (
	"testing"

	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

type stubThreads struct {
	n   int
	why string
}

func (s *stubThreads) Threads() int          { return s.n }
func (s *stubThreads) ThreadsReason() string { return s.why }

// Status reads the threads live from the context, not from the view
// published at load: the view stays as it was.
func TestStatusThreadsAreLive(t *testing.T) {
	pub := &pb.DeviceInfo{Reason: "CPU only", Threads: 0}
	st := &stubThreads{n: 1, why: "batches 1 of 2 CPUs: auto, 1 held by other processes"}
	d := withThreads(pub, st)
	if d.Threads != 1 || d.Reason != "CPU only; cpu threads: batches 1 of 2 CPUs: auto, 1 held by other processes" {
		t.Fatalf("first: %d %q", d.Threads, d.Reason)
	}
	st.n, st.why = 2, "batches 2 of 2 CPUs: auto, idle"
	if d := withThreads(pub, st); d.Threads != 2 || d.Reason != "CPU only; cpu threads: batches 2 of 2 CPUs: auto, idle" {
		t.Fatalf("after the load changed: %d %q", d.Threads, d.Reason)
	}
	if pub.Threads != 0 || pub.Reason != "CPU only" {
		t.Fatalf("the published view was changed: %v", pub)
	}
	if d := withThreads(pub, &stubThreads{}); d.Reason != "CPU only" {
		t.Fatalf("no decision yet: %q", d.Reason)
	}
	if withThreads(nil, st) != nil || withThreads(pub, nil) != pub {
		t.Fatal("nil device or reporter")
	}
}
