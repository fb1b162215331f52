package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/cli"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/policy"
)

// crashResult is what "bench crash" prints.
type crashResult struct {
	Kills            int      `json:"kills"`
	Committed        int      `json:"committed"`         // snapshots reported saved before a kill
	Verified         int      `json:"verified_restores"` // restores checked bit-exact (continuation equal)
	Mismatches       []string `json:"mismatches"`        // committed snapshots that did not restore exactly
	ProblemsReported int      `json:"problems_reported"` // files 'snapshot verify' set aside at the end
	Seconds          float64  `json:"seconds"`
}

// benchCrash kills ctxd with SIGKILL at random moments while it writes
// snapshots, restarting it each time, and checks that every snapshot it
// reported committed restores bit-exactly (same greedy continuation).
func benchCrash(ctx context.Context, e *cli.Env, args []string) error {
	fs := flag.NewFlagSet("bench crash", flag.ContinueOnError)
	model := fs.String("model", defaultModel(), "GGUF model")
	kills := fs.Int("kills", 50, "SIGKILLs")
	seed := fs.Uint64("seed", 1, "seed of the kill times and prompts")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := cli.Parse(fs, e.Stderr, args); err != nil {
		return err
	}
	res, err := runCrash(ctx, siblingBinary("ctxd"), *model, *kills, *seed, func(round int) {
		if !*asJSON {
			fmt.Fprintf(e.Stderr, "\rkill %d/%d", round+1, *kills)
		}
	})
	if !*asJSON {
		fmt.Fprintln(e.Stderr)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if err := e.PrintJSON(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "kills %d  committed %d  verified_restores %d  mismatches %d  problems_reported %d  (%.1f s)\n",
			res.Kills, res.Committed, res.Verified, len(res.Mismatches), res.ProblemsReported, res.Seconds)
	}
	if len(res.Mismatches) > 0 {
		return fmt.Errorf("committed snapshots that did not restore exactly: %v", res.Mismatches)
	}
	return nil
}

// runCrash is the crash loop; onRound sees each round start.
func runCrash(ctx context.Context, bin, model string, kills int, seed uint64, onRound func(int)) (crashResult, error) {
	start := time.Now()
	var res crashResult
	dir, err := os.MkdirTemp("", "ctxd-crash-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	rng := rand.New(rand.NewPCG(seed, 11))
	expected := map[string][]int32{} // committed snapshot → its greedy continuation
	var names []string
	for round := 0; round <= kills; round++ {
		if onRound != nil && round < kills {
			onRound(round)
		}
		d, err := startKillable(ctx, bin, model, dir, round)
		if err != nil {
			return res, err
		}
		c, err := client.Dial(ctx, d.sock)
		if err != nil {
			d.kill()
			return res, err
		}
		// After every restart: the newest committed snapshot and two at
		// random restore exactly; at the end, all of them.
		check := names
		if round < kills && len(names) > 3 {
			check = []string{names[len(names)-1], names[rng.IntN(len(names))], names[rng.IntN(len(names))]}
		}
		for _, n := range check {
			got, err := restoreContinuation(ctx, c, n, len(expected[n]))
			if err != nil || !slices.Equal(got, expected[n]) {
				res.Mismatches = append(res.Mismatches, fmt.Sprintf("%s (round %d: %v)", n, round, err))
				continue
			}
			res.Verified++
		}
		if round == kills {
			if v, err := c.VerifyCold(ctx); err == nil {
				res.ProblemsReported = len(v.Problems)
			}
			c.Close()
			d.stop()
			break
		}
		// Write snapshots until killed at a random moment.
		var mu sync.Mutex
		committed := map[string][]int32{}
		var order []string
		done := make(chan struct{})
		grng := rand.New(rand.NewPCG(seed, uint64(round)+1000))
		go func() {
			defer close(done)
			s, err := c.OpenSession(ctx, "crash")
			if err != nil {
				return
			}
			for i := 0; ; i++ {
				n := 96 + grng.IntN(256)
				ids := make([]int32, n)
				for j := range ids {
					ids[j] = 3 + int32(grng.IntN(500))
				}
				m := policy.Manifest{Segments: []policy.Segment{{ID: "p", Kind: policy.KindUserTurn, Stable: true, Tokens: ids}}}
				if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
					return
				}
				name := fmt.Sprintf("crash-%03d-%03d", round, i)
				if _, err := s.Snapshot(ctx, name); err != nil {
					return
				}
				// Committed: the continuation from here is what a restore
				// must reproduce.
				cont, err := greedy(ctx, s, 4)
				if err != nil {
					return
				}
				mu.Lock()
				committed[name] = cont
				order = append(order, name)
				mu.Unlock()
			}
		}()
		time.Sleep(time.Duration(50+rng.IntN(750)) * time.Millisecond)
		d.kill()
		c.Close()
		<-done
		mu.Lock()
		for _, n := range order {
			expected[n] = committed[n]
			names = append(names, n)
		}
		mu.Unlock()
		res.Kills++
	}
	res.Committed = len(names)
	sort.Strings(res.Mismatches)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

func restoreContinuation(ctx context.Context, c *client.Client, name string, n int) ([]int32, error) {
	s, err := c.OpenSession(ctx, "verify")
	if err != nil {
		return nil, err
	}
	defer s.Close(context.WithoutCancel(ctx))
	if _, err := s.Restore(ctx, name); err != nil {
		return nil, err
	}
	return greedy(ctx, s, n)
}

// killable is a ctxd child process on a fixed data directory.
type killable struct {
	cmd  *exec.Cmd
	sock string
}

func startKillable(ctx context.Context, bin, model, dir string, round int) (*killable, error) {
	sock := filepath.Join(dir, fmt.Sprintf("ctxd-%d.sock", round))
	cmd := exec.Command(bin, "--model", model, "--ctx", "512", "--socket", sock, "--data-dir", filepath.Join(dir, "data"), "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	d := &killable{cmd: cmd, sock: sock}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := client.Dial(ctx, sock)
		if err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			d.kill()
			return nil, errors.Join(fmt.Errorf("ctxd did not come up on %s", sock), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (d *killable) kill() {
	d.cmd.Process.Kill()
	d.cmd.Wait()
}

func (d *killable) stop() {
	d.cmd.Process.Signal(os.Interrupt)
	d.cmd.Wait()
}
