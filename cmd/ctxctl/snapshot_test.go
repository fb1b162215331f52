package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/sidecar"
)

func TestSnapshotCommandsRoundTrip(t *testing.T) {
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 8192, IdleSnapshot: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	sock := p.Socket
	traces, _ := filepath.Glob(filepath.Join(testmodel.Traces(t), "*.traj"))
	if len(traces) == 0 {
		t.Skip("no traces")
	}
	// Replay a trace into the daemon and save it; its final_tokens are the
	// continuation a restore must reproduce.
	code, out, errs := ctl(t, "--socket", sock, "replay", "--trace", traces[0], "--json", "--save-snapshot", "replayed", "--final-tokens", "10", "--decode-tokens", "2")
	var rep struct {
		Summary struct {
			Snapshot    string  `json:"snapshot"`
			FinalTokens []int32 `json:"final_tokens"`
		} `json:"summary"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Summary.Snapshot != "replayed" || len(rep.Summary.FinalTokens) != 10 {
		t.Fatalf("replay --save-snapshot: %d %s %s", code, out, errs)
	}
	code, out, errs = ctl(t, "--socket", sock, "snapshot", "restore", "replayed", "--generate", "10", "--json")
	var rr struct {
		RestoreMS float64 `json:"restore_ms"`
		Tokens    []int32 `json:"tokens"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rr) != nil {
		t.Fatalf("snapshot restore: %d %s %s", code, out, errs)
	}
	if !slices.Equal(rr.Tokens, rep.Summary.FinalTokens) || rr.RestoreMS <= 0 {
		t.Fatalf("restored continuation %v (%.1f ms), replay's final_tokens %v", rr.Tokens, rr.RestoreMS, rep.Summary.FinalTokens)
	}
	// An agent's open session, saved by the operator.
	c, err := client.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.OpenSession(context.Background(), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnsurePrefix(context.Background(), client.Manifest{Segments: []client.Segment{{ID: "a", Kind: client.KindSystem, Stable: true, Text: "Once upon a time there was a dog."}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errs = ctl(t, "--socket", sock, "snapshot", "save", "again")
	if code != 0 || !strings.Contains(out, "saved again") {
		t.Fatalf("snapshot save: %d %s %s", code, out, errs)
	}
	code, out, errs = ctl(t, "--socket", sock, "snapshot", "ls")
	if code != 0 || !strings.Contains(out, "replayed") || !strings.Contains(out, "again") {
		t.Fatalf("snapshot ls: %d %s %s", code, out, errs)
	}
	code, out, errs = ctl(t, "--socket", sock, "snapshot", "verify")
	if code != 0 || !strings.Contains(out, "0 problems") {
		t.Fatalf("snapshot verify: %d %s %s", code, out, errs)
	}
	code, _, errs = ctl(t, "--socket", sock, "snapshot", "rm", "again")
	if code != 0 {
		t.Fatalf("snapshot rm: %d %s", code, errs)
	}
	if code, _, errs = ctl(t, "--socket", sock, "snapshot", "restore", "again"); code == 0 || !strings.Contains(errs, "not found") {
		t.Fatalf("restore of a removed snapshot: %d %s", code, errs)
	}
	if code, _, errs = ctl(t, "--socket", sock, "snapshot", "save", "bad/name"); code == 0 {
		t.Fatalf("a bad snapshot name was accepted: %s", errs)
	}
}
