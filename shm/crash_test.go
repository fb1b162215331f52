package shm

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The crash test re-executes the test binary as a child (TestCrashChild
// with CTXD_SHM_CRASH_DIR set) that Puts, re-Puts and Deletes blocks
// forever, printing a line before ("p", "r", "d") and after ("P", "R",
// "D") each operation. The parent SIGKILLs it at a random moment, then
// opens the arena and checks: Open succeeds with nothing dropped, Check
// passes, every block whose Put was reported (and not deleted since) is
// there bit-exact, and nothing else is there except the one operation in
// flight.

const (
	crashDirEnv  = "CTXD_SHM_CRASH_DIR"
	crashBaseEnv = "CTXD_SHM_CRASH_BASE"
	crashSyncEnv = "CTXD_SHM_CRASH_SYNC"
	crashAtEnv   = "CTXD_SHM_CRASH_AT" // "point:n": die at the n-th crashPoint(point)
)

// crashPoints are the windows of Put and Delete; each is hit on purpose
// (besides the random kills).
var crashPoints = []string{
	"put:slabs-written", "put:entry-written", "put:entry-committed", "put:old-cleared",
	"put:gen-bumped", "clear:gen-zeroed", "delete:entry-cleared", "delete:gen-bumped",
}

func crashOptions(sync bool) Options {
	return Options{SlabBytes: 4096, RegionBytes: 48 * 4096, BudgetBytes: 768 << 10, Compat: "crash", Sync: sync}
}

func crashBlock(id uint64) Block { return sizedBlock(id, 40_000) }

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashKill9")
	}
	base, _ := strconv.ParseUint(os.Getenv(crashBaseEnv), 10, 64)
	if at := os.Getenv(crashAtEnv); at != "" {
		i := strings.LastIndexByte(at, ':')
		point := at[:i]
		n, _ := strconv.Atoi(at[i+1:])
		crashHook = func(p string) {
			if p == point {
				if n--; n == 0 {
					syscall.Kill(os.Getpid(), syscall.SIGKILL)
					select {}
				}
			}
		}
	}
	a, _, err := Open(dir, crashOptions(os.Getenv(crashSyncEnv) == "1"))
	if err != nil {
		fmt.Printf("E open %v\n", err)
		os.Exit(2)
	}
	say := func(op string, id uint64) { fmt.Fprintf(os.Stdout, "%s %d\n", op, id) } // unbuffered: one write(2) per line
	say("ready", 0)
	rng := rand.New(rand.NewPCG(base, 7))
	for id := base; ; id++ {
		if list := a.List(); len(list) > 0 && rng.IntN(4) == 0 {
			// Re-put an existing block (same bytes): exercises the
			// replacing path, which must never lose the block.
			old := list[rng.IntN(len(list))].ID
			say("r", old)
			if err := a.Put(crashBlock(old)); err == nil {
				say("R", old)
			} else if !errors.Is(err, ErrArenaFull) {
				fmt.Printf("E put %v\n", err)
				os.Exit(2)
			}
		}
		b := crashBlock(id)
		for {
			say("p", id)
			err := a.Put(b)
			if err == nil {
				say("P", id)
				break
			}
			if !errors.Is(err, ErrArenaFull) {
				fmt.Printf("E put %v\n", err)
				os.Exit(2)
			}
			// Evict the oldest block.
			victim := a.List()[0].ID
			say("d", victim)
			if err := a.Delete(victim); err != nil {
				fmt.Printf("E delete %v\n", err)
				os.Exit(2)
			}
			say("D", victim)
		}
	}
}

func TestCrashKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	dir := t.TempDir()
	committed := map[uint64]bool{} // Put reported, no Delete started since
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	// First every crash point at its 1st, 4th and 9th occurrence, then 30
	// kills at random moments (every 5th with Options.Sync).
	var planned []string
	for _, p := range crashPoints {
		for _, n := range []int{1, 4, 9} {
			planned = append(planned, fmt.Sprintf("%s:%d", p, n))
		}
	}
	rounds := len(planned) + 30
	inFlightPuts := 0
	var prevGen uint64
	var prevIDs []uint64
	for round := range rounds {
		at := ""
		if round < len(planned) {
			at = planned[round]
		}
		syncMode := round%5 == 4
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashAtEnv+"="+at,
			crashBaseEnv+"="+strconv.Itoa((round+1)*1_000_000), crashSyncEnv+"="+map[bool]string{true: "1"}[syncMode])
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var lines []string
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			once := false
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
				if !once && sc.Text() == "ready 0" {
					once = true
					close(ready)
				}
			}
			if !once {
				close(ready)
			}
		}()
		<-ready
		if at == "" {
			d := time.Duration(rng.IntN(40_000)) * time.Microsecond
			if syncMode {
				d *= 10 // msync is slow on a disk-backed folder
			}
			time.Sleep(d)
			cmd.Process.Signal(syscall.SIGKILL)
		} else {
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Signal(syscall.SIGKILL)
				t.Errorf("round %d: child never reached crash point %s", round, at)
			}
		}
		<-done
		werr := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child was not killed by SIGKILL: %v\n%s", round, werr, strings.Join(lines, "\n"))
		}

		// Replay the child's log into the model.
		uncertain := map[uint64]bool{} // operation started, not reported
		puts := 0
		for _, l := range lines {
			var op string
			var id uint64
			if _, err := fmt.Sscanf(l, "%s %d", &op, &id); err != nil {
				continue
			}
			switch op {
			case "E":
				t.Fatalf("round %d: child error: %s", round, l)
			case "p", "r":
				uncertain[id] = true
			case "P", "R":
				delete(uncertain, id)
				committed[id] = true
				puts++
			case "d":
				delete(committed, id)
				uncertain[id] = true
			case "D":
				delete(uncertain, id)
			}
		}
		for id := range uncertain {
			if !committed[id] {
				inFlightPuts++
			}
		}

		a, rep, err := Open(dir, crashOptions(false))
		if err != nil {
			t.Fatalf("round %d: Open after kill: %v", round, err)
		}
		if len(rep.Dropped) != 0 || len(rep.SetAside) != 0 {
			t.Fatalf("round %d: a kill made Open drop or set aside: %+v", round, rep)
		}
		if err := a.Check(); err != nil {
			t.Fatalf("round %d: Check after kill: %v", round, err)
		}
		for id := range committed {
			got, err := a.Get(id)
			if err != nil {
				t.Fatalf("round %d: committed block %d lost: %v", round, id, err)
			}
			if err := sameBlock(got, crashBlock(id)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for _, m := range a.List() {
			if !committed[m.ID] && !uncertain[m.ID] {
				t.Fatalf("round %d: block %d present but never committed", round, m.ID)
			}
			got, err := a.Get(m.ID)
			if err != nil {
				t.Fatalf("round %d: Get %d: %v", round, m.ID, err)
			}
			if err := sameBlock(got, crashBlock(m.ID)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			committed[m.ID] = true // an in-flight Put that made it is now committed
		}
		// The generation never goes back, and moves whenever the set of
		// blocks changed.
		var ids []uint64
		for _, m := range a.List() {
			ids = append(ids, m.ID)
		}
		if rep.Generation < prevGen || (!slices.Equal(ids, prevIDs) && rep.Generation == prevGen) {
			t.Fatalf("round %d: generation %d after %d (blocks changed: %v)", round, rep.Generation, prevGen, !slices.Equal(ids, prevIDs))
		}
		prevGen, prevIDs = rep.Generation, ids
		t.Logf("round %d (sync=%v, crash at %q): %d Puts reported, killed with %d ops in flight, %d blocks, gen %d, notes %v",
			round, syncMode, at, puts, len(uncertain), rep.Blocks, rep.Generation, rep.Notes)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rounds, %d killed during an uncommitted Put", rounds, inFlightPuts)
}
