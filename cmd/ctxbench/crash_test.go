package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/internal/testmodel"
)

// TestCrashLoopKeepsCommittedSnapshots runs the crash benchmark's loop
// on the real ctxd binary: SIGKILL while snapshots are written, restart,
// and every snapshot reported committed restores bit-exactly.
func TestCrashLoopKeepsCommittedSnapshots(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ctxd")
	build := exec.Command("go", "build", "-o", bin, "github.com/ctxd/ctxd/cmd/ctxd")
	build.Env = os.Environ()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building ctxd: %v\n%s", err, out)
	}
	kills := 20
	if testing.Short() {
		kills = 5
	}
	res, err := runCrash(context.Background(), bin, testmodel.Stories(t), kills, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Mismatches) > 0 || res.Kills != kills || res.Committed == 0 || res.Verified < res.Committed {
		t.Fatalf("crash loop: %+v", res)
	}
	t.Logf("%d kills, %d snapshots committed, %d restores verified bit-exact, %d files set aside", res.Kills, res.Committed, res.Verified, res.ProblemsReported)
}
