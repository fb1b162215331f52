package coldstore

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The crash test re-executes the test binary as a child that writes
// blocks and snapshots in a loop (crashChild) and SIGKILLs it at random
// moments.
const (
	crashDirEnv   = "CTXD_COLDSTORE_CRASH_DIR"
	crashRoundEnv = "CTXD_COLDSTORE_CRASH_ROUND"
	crashNames    = 6 // snapshot names cycle, so snapshots get replaced
	crashQuota    = 1 << 20
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashDirEnv); dir != "" {
		round, _ := strconv.Atoi(os.Getenv(crashRoundEnv))
		if err := crashChild(dir, round); err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashBlock is the block j of iteration iter of round: everything about
// it, content included, follows from its chain, and its size from its key.
func crashBlock(round, iter, j int) testBlock {
	var in [24]byte
	binary.LittleEndian.PutUint64(in[0:], uint64(round))
	binary.LittleEndian.PutUint64(in[8:], uint64(iter))
	binary.LittleEndian.PutUint64(in[16:], uint64(j))
	chain := sha256.Sum256(in[:])
	key := BlockKey(testCompat, chain)
	return blockForKey(key, chain, crashBlockSize(key))
}

func crashBlockSize(k Key) int { return 2000 + int(k[11])*150 + int(k[12]&1) }

// crashChild writes until killed (or for at most 20 s): each iteration
// stores 1–3 new blocks (Put, or Enqueue and Flush), saves a snapshot of
// them and then prints "committed <name> <round> <iter>".
func crashChild(dir string, round int) error {
	ctx := context.Background()
	s, _, err := Open(ctx, Config{Dir: dir, Workers: 1, QuotaBytes: crashQuota})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	deadline := time.Now().Add(20 * time.Second)
	for iter := 0; time.Now().Before(deadline); iter++ {
		n := 1 + iter%3
		var blocks []SnapshotBlock
		for j := range n {
			b := crashBlock(round, iter, j)
			if (iter+j)%2 == 0 {
				err = s.Put(ctx, b.key, b.meta, b.blob)
			} else {
				err = s.Enqueue(b.key, b.meta, b.blob)
			}
			if err != nil {
				return err
			}
			blocks = append(blocks, SnapshotBlock{b.key, len(b.meta.Tokens)})
		}
		if err := s.Flush(ctx); err != nil {
			return err
		}
		name := fmt.Sprintf("snap-%d", iter%crashNames)
		meta := fmt.Sprintf("%d %d", round, iter)
		if err := s.SaveSnapshot(ctx, Snapshot{Name: name, Compat: testCompat, Meta: []byte(meta), Blocks: blocks}); err != nil {
			return err
		}
		fmt.Printf("committed %s %s\n", name, meta)
	}
	return s.Close()
}

type committed struct{ round, iter int }

func (a committed) less(b committed) bool {
	return a.round < b.round || a.round == b.round && a.iter < b.iter
}

func TestCrashSafety(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	last := map[string]committed{} // newest committed version reported per name
	var totalCommitted, tempRemoved, killedBeforeReady int
	start := time.Now()
	for round := 0; round < rounds; round++ {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashRoundEnv+"="+strconv.Itoa(round))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var got []string
		// waitLine collects lines until one starts with prefix.
		waitLine := func(prefix string) {
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						cmd.Wait()
						t.Fatalf("round %d: child ended early: %s", round, stderr.String())
					}
					got = append(got, l)
					if strings.HasPrefix(l, prefix) {
						return
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: no %q from the child", round, prefix)
				}
			}
		}
		switch mode := rng.IntN(8); {
		case mode == 0: // early: the child may still be opening the store
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
		case mode < 4: // anywhere in the first writes
			waitLine("ready")
			time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		default: // after at least one commit
			waitLine("committed")
			time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		for l := range lines {
			got = append(got, l)
		}
		werr := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL: %v; stderr: %s", round, werr, stderr.String())
		}
		if len(got) == 0 || got[0] != "ready" {
			killedBeforeReady++
		}
		for _, l := range got {
			var name string
			var c committed
			if _, err := fmt.Sscanf(l, "committed %s %d %d", &name, &c.round, &c.iter); err == nil {
				last[name] = c
				totalCommitted++
			}
		}

		// Reopen and check.
		s, rep, err := Open(ctx, Config{Dir: dir, QuotaBytes: crashQuota})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		tempRemoved += rep.TempRemoved
		if len(rep.SetAside) != 0 || len(rep.Missing) != 0 {
			t.Fatalf("round %d: reopen found damage: %v %v", round, rep.SetAside, rep.Missing)
		}
		if left := tempFiles(t, dir); len(left) != 0 {
			t.Fatalf("round %d: temporary files after Open: %v", round, left)
		}
		for name, want := range last {
			snap, err := s.LoadSnapshot(ctx, name)
			if err != nil {
				t.Fatalf("round %d: committed snapshot %s (%v): %v", round, name, want, err)
			}
			var have committed
			fmt.Sscanf(string(snap.Meta), "%d %d", &have.round, &have.iter)
			if have.less(want) {
				t.Fatalf("round %d: snapshot %s is version %v, older than committed %v", round, name, have, want)
			}
			for _, sb := range snap.Blocks {
				meta, blob, err := s.Get(ctx, sb.Key)
				if err != nil {
					t.Fatalf("round %d: snapshot %s block %s: %v", round, name, sb.Key, err)
				}
				if BlockKey(testCompat, meta.Chain) != sb.Key {
					t.Fatalf("round %d: block %s holds chain of another key", round, sb.Key)
				}
				want := blockForKey(sb.Key, meta.Chain, crashBlockSize(sb.Key))
				if string(blob) != string(want.blob) || !metaEqual(meta, want.meta) {
					t.Fatalf("round %d: block %s content differs", round, sb.Key)
				}
			}
		}
		// Every other stored block checks out too.
		if round%10 == 9 || round == rounds-1 {
			if problems, err := s.Verify(ctx); err != nil || len(problems) != 0 {
				t.Fatalf("round %d: Verify: %v %v", round, problems, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if totalCommitted < rounds/2 {
		t.Fatalf("only %d snapshots committed in %d rounds: the kills came too early to test much", totalCommitted, rounds)
	}
	t.Logf("%d rounds in %v: %d snapshots committed, %d names checked, %d temporary files cleaned, %d kills before ready",
		rounds, time.Since(start).Round(time.Millisecond), totalCommitted, len(last), tempRemoved, killedBeforeReady)
}
