package sidecar

import (
	"context"
	"errors"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar/internal/layout"
)

// spillServer runs the needle model with a 1 MiB arena, so a long
// haystack spills most of its blocks to the SSD tier, and streams the
// haystack into a new session.
func spillServer(t *testing.T) (*testServer, *client.Session, []int32) {
	t.Helper()
	ts := startServer(t, Config{ModelPath: testmodel.Needle(t), HotTokens: 256, ContextTokens: 256, ArenaBytes: 1 << 20})
	c := dial(t, ts)
	hay, needle := haystack(rand.New(rand.NewSource(5)), 3000)
	s := openSession(t, c)
	m := client.Manifest{Segments: []client.Segment{{ID: "hay", Kind: client.KindTerminal, Tokens: hay, Stable: true}}}
	if _, err := s.EnsurePrefix(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return ts, s, needle
}

// needleTurn asks for the needle and reports the accuracy of the 20
// teacher-forced tokens and whether the needle's block was retrieved.
func needleTurn(t *testing.T, s *client.Session, needle []int32) (float64, bool, client.Explanation) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "query", Kind: client.KindUserTurn, Tokens: needle[:4]}); err != nil {
		t.Fatal(err)
	}
	hits := 0
	if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 20, Forced: needle[4:]}, func(tok client.Token) error {
		if tok.Predicted == tok.ID {
			hits++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range ex.Retrieved {
		if b.FirstToken <= 41 && b.FirstToken+b.Tokens >= 41+24 {
			found = true
		}
	}
	return float64(hits) / 20, found, ex
}

// TestFailedSSDReadKeepsTheBlockRetrievable: while the SSD tier cannot
// read its blocks (each block file replaced by a folder: an I/O error the
// store keeps the block for), a turn's admissions fail; the blocks stay
// spilled, not lost, and once the files are back the next turn brings the
// needle's block back from the SSD.
func TestFailedSSDReadKeepsTheBlockRetrievable(t *testing.T) {
	ts, s, needle := spillServer(t)
	// The spills' writes land first (none is left in flight to race the
	// swap below).
	if err := ts.srv.tiers.SSD().Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocks := filepath.Join(ts.cfg.DataDir, "cold", "blocks")
	var files []string
	if err := filepath.WalkDir(blocks, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".blk") && !strings.HasPrefix(d.Name(), ".") {
			files = append(files, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no block was spilled to the SSD tier")
	}
	for _, f := range files {
		if err := os.Rename(f, f+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(f, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	_, found, ex := needleTurn(t, s, needle)
	unreadable := false
	for _, d := range ex.Diagnostics {
		unreadable = unreadable || strings.Contains(d, "unreadable")
	}
	if found || !unreadable || ex.LostBlocks != 0 || ex.ColdBlocks == 0 {
		t.Fatalf("SSD reads failing: needle retrieved %v, unreadable diagnostic %v, %d blocks lost, %d spilled; diagnostics %q",
			found, unreadable, ex.LostBlocks, ex.ColdBlocks, ex.Diagnostics)
	}
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f+".away", f); err != nil {
			t.Fatal(err)
		}
	}
	acc, found, ex := needleTurn(t, s, needle)
	checkHot(t, ts.srv)
	if !found || acc < 0.8 || ex.LostBlocks != 0 {
		t.Fatalf("after the SSD tier recovered: accuracy %.2f, needle retrieved %v, %d blocks lost", acc, found, ex.LostBlocks)
	}
}

// TestCancelledAdmissionKeepsTheBlockRetrievable: a turn whose context
// ends while blocks are being read back from the SSD tier fails with
// ErrCancelled and leaves the hot set consistent; every spilled block
// stays spilled, and the next turn admits the needle's block.
func TestCancelledAdmissionKeepsTheBlockRetrievable(t *testing.T) {
	ts, s, needle := spillServer(t)
	srv := ts.srv
	if err := srv.slot.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	sess := srv.slot.resident
	residency := func() *pb.ExplainReply {
		rep := &pb.ExplainReply{TokensByClass: map[string]int64{}}
		sess.layout.Explain(rep)
		return rep
	}
	before := residency()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the turn is cancelled before its SSD reads complete
	target := layout.Prompt{Tokens: append(slices.Clone(sess.tape.Tokens()), needle[:4]...), Spans: sess.tape.Spans(), Turn: sess.tape.Len()}
	if srv.slot.hot.Scorers.Has(policy.ScorerAttention) {
		// The attention scorer's probe decode sees the cancellation first:
		// the turn fails before planning and the layout stays consistent.
		if _, err := sess.layout.Sync(ctx, target, true, false, true); !errors.Is(err, protocol.ErrCancelled) {
			t.Fatalf("cancelled probe: %v, want ErrCancelled", err)
		}
		if err := layout.Check(sess.layout, srv.slot.ectx.Used()); err != nil {
			t.Fatalf("after a cancelled probe: %v", err)
		}
		srv.slot.hot.Scorers = policy.ScorerLexical // then the SSD reads are what the cancellation meets
	}
	_, err := sess.layout.Sync(ctx, target, true, false, true)
	after := residency()
	used := srv.slot.ectx.Used()
	checkErr := layout.Check(sess.layout, used)
	srv.slot.release()
	ssdTried := false
	for _, d := range after.Diagnostics {
		ssdTried = ssdTried || strings.Contains(d, "unreadable from the ssd tier")
	}
	if !ssdTried {
		t.Fatalf("the plan read nothing back from the SSD tier; diagnostics %q", after.Diagnostics)
	}
	if !errors.Is(err, protocol.ErrCancelled) {
		t.Fatalf("cancelled admission: %v, want ErrCancelled", err)
	}
	if checkErr != nil {
		t.Fatalf("after a cancelled admission: %v", checkErr)
	}
	if before.ColdBlocks == 0 || after.ColdBlocks != before.ColdBlocks || after.LostBlocks != 0 {
		t.Fatalf("spilled blocks: %d before a cancelled admission, %d after (%d lost)", before.ColdBlocks, after.ColdBlocks, after.LostBlocks)
	}
	acc, found, ex := needleTurn(t, s, needle)
	checkHot(t, srv)
	if !found || acc < 0.8 || ex.LostBlocks != 0 {
		t.Fatalf("the turn after a cancelled admission: accuracy %.2f, needle retrieved %v, %d blocks lost", acc, found, ex.LostBlocks)
	}
}
