package sidecar_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// TestFakeFullFilesystemDegradesLoudly: when the filesystem under the
// arena is full, parked blocks go to the SSD tier instead of being lost,
// the refusals are counted (ctxd_arena_no_space_total) and status shows
// the arena's real capacity. Before, 35 blocks were lost with nothing but
// "lost" in explain, metrics at 0 and status advertising the whole budget.
// It needs root (a 1 MiB tmpfs under the data directory).
func TestFakeFullFilesystemDegradesLoudly(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	data := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(data, 0o700)
	if err := syscall.Mount("tmpfs", data, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(data, syscall.MNT_DETACH) })
	cfg := hotConfig()
	cfg.DataDir, cfg.NoCold, cfg.ColdDir, cfg.ColdQuotaBytes = data, false, filepath.Join(t.TempDir(), "cold"), 256<<20
	d := startFake(t, cfg, enginefake.Options{})
	id := d.open("hay")
	hay := ids(1, 3000, 0, 250)
	d.mustEnsure(id, manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay)))
	ex := d.explain(id)
	if ex.GetLostBlocks() != 0 || ex.GetColdBlocks() == 0 {
		t.Errorf("explain: lost %d, cold %d blocks; want none lost, the rest in the SSD tier", ex.GetLostBlocks(), ex.GetColdBlocks())
	}
	m := d.must(d.call(&pb.Request{Body: &pb.Request_Metrics{Metrics: &pb.MetricsRequest{}}}, nil)).GetMetrics()
	if m.GetValues()["ctxd_arena_no_space_total"] == 0 {
		t.Errorf("ctxd_arena_no_space_total is 0")
	}
	st := d.must(d.call(&pb.Request{Body: &pb.Request_Status{Status: &pb.StatusRequest{}}}, nil)).GetStatus()
	if got := st.GetCapacity().GetArenaBytes(); got >= cfg.ArenaBytes || got > 1<<20 {
		t.Errorf("status advertises an arena of %d bytes on a 1 MiB filesystem (budget %d)", got, cfg.ArenaBytes)
	}
}
