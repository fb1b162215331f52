package main

import (
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/sidecar"
)

// handBuiltExplain is a hot-set session of 20,000 tokens: a pinned system
// prompt, a repo map, a long terminal log mostly parked with two blocks
// retrieved, and a user turn.
func handBuiltExplain() client.Explanation {
	return client.Explanation{
		SessionID: 7, ResidentTokens: 20000, GeneratedTokens: 16,
		Segments: []client.SegmentResidency{
			{ID: "system", Kind: client.KindSystem, Class: client.ClassTaskPinned, Tokens: 800, ResidentTokens: 800, FirstPosition: 0, Stable: true},
			{ID: "repo_map", Kind: client.KindRepoMap, Class: client.ClassRepoMap, Tokens: 3200, ResidentTokens: 0, FirstPosition: 800, Stable: true},
			{ID: "terminal", Kind: client.KindTerminal, Class: client.ClassVolatile, Tokens: 15000, ResidentTokens: 1128, FirstPosition: 4000, Stable: true},
			{ID: "turn", Kind: client.KindUserTurn, Class: client.ClassVolatile, Tokens: 1000, ResidentTokens: 1000, FirstPosition: 19000},
		},
		TokensByClass: map[string]int{"task_pinned": 800, "repo_map": 3200, "volatile": 16000},
		HotTokens:     2928, ParkedTokens: 17072, ProtectedTokens: 2800, RetrievedTokens: 128, HotBlocks: 40, ParkedBlocks: 260,
		Retrieved: []client.RetrievedBlock{
			{BlockID: 90, FirstToken: 9000, Tokens: 64, Score: 3.2, Reason: "bm25"},
			{BlockID: 20, FirstToken: 5120, Tokens: 64, Score: 2.1, Reason: "bm25"},
		},
	}
}

func TestExplainSpans(t *testing.T) {
	segs, engine, total := explainSpans(handBuiltExplain())
	if total != 20000 || len(segs) != 4 || segs[1].label != "repo_map" || segs[1].color != classColors[policy.ClassRepoMap] {
		t.Fatalf("segments %v, total %v", segs, total)
	}
	hot := map[color.Color]float64{}
	for _, s := range engine {
		hot[s.color] += s.to - s.from
	}
	// Parked background over every segment; hot drawn for each segment's
	// resident tokens minus its retrieved ones; retrieved exactly.
	if hot[parkedColor] != 20000 || hot[hotColor] != 800+1000+1000 || hot[retrievedColor] != 128 {
		t.Fatalf("engine band: %v", hot)
	}
	// The terminal's 1000 other hot tokens sit at its end.
	found := false
	for _, s := range engine {
		if s.color == hotColor && s.from == 18000 && s.to == 19000 {
			found = true
		}
	}
	if !found {
		t.Fatalf("terminal's hot tail missing: %v", engine)
	}
	// Dense (no hot set): everything is in the engine.
	_, engine, _ = explainSpans(client.Explanation{ResidentTokens: 300, Segments: []client.SegmentResidency{{ID: "p", Tokens: 300, ResidentTokens: 300}}})
	if len(engine) != 1 || engine[0].to != 300 || engine[0].color != hotColor {
		t.Fatalf("dense: %v", engine)
	}
}

// decodePNG reads path and counts the pixels of each colour in want.
func decodePNG(t *testing.T, path string, want ...color.RGBA) (image.Image, map[color.RGBA]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	counts := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
			for _, w := range want {
				if c == w {
					counts[w]++
				}
			}
		}
	}
	return img, counts
}

func TestWriteExplainPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ctx.png")
	if err := writeExplainPNG(handBuiltExplain(), path); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Size() < 2000 {
		t.Fatalf("png: %v", err)
	}
	all := []color.RGBA{classColors[policy.ClassTaskPinned], classColors[policy.ClassRepoMap], classColors[policy.ClassVolatile], hotColor, parkedColor, retrievedColor}
	img, counts := decodePNG(t, path, all...)
	if b := img.Bounds(); b.Dx() < 800 || b.Dy() < 200 {
		t.Fatalf("image %v", b)
	}
	for _, c := range all {
		if counts[c] < 30 { // every colour shows: a band region or at least its legend swatch
			t.Errorf("colour %v: %d pixels", c, counts[c])
		}
	}
	// Volatile covers 80% of the segments band: far more pixels than pinned.
	if counts[classColors[policy.ClassVolatile]] < 10*counts[classColors[policy.ClassTaskPinned]]/2 {
		t.Errorf("volatile %d vs task_pinned %d pixels", counts[classColors[policy.ClassVolatile]], counts[classColors[policy.ClassTaskPinned]])
	}
	if os.Getenv("CTXD_KEEP_PNG") != "" {
		data, _ := os.ReadFile(path)
		os.WriteFile(os.Getenv("CTXD_KEEP_PNG"), data, 0o644)
	}
	if err := writeExplainPNG(handBuiltExplain(), filepath.Join(t.TempDir(), "missing", "x.png")); err == nil {
		t.Fatal("no error for a folder that does not exist")
	}
}

// TestExplainPNGAgainstADaemon: a hot-set session on a private daemon,
// drawn by ctxctl explain --png.
func TestExplainPNGAgainstADaemon(t *testing.T) {
	p, err := sidecar.StartPrivate(sidecar.Config{Engine: llama.Backend{}, ModelPath: testmodel.Stories(t), ContextTokens: 256, HotTokens: 256, Window: 256, ArenaBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, p.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.OpenSession(ctx, "explain png")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("The little dog ran to the park and played with a red ball. ", 60)
	m := policy.Manifest{Segments: []policy.Segment{
		{ID: "system", Kind: policy.KindSystem, Text: "You are a helpful agent.", Stable: true},
		{ID: "map", Kind: policy.KindRepoMap, Text: "main.go util.go README.md", Stable: true},
		{ID: "log", Kind: policy.KindTerminal, Text: long, Stable: true},
	}}
	if _, err := s.EnsurePrefix(ctx, clientconv.Manifest(m)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx, client.Segment{ID: "turn", Kind: client.KindUserTurn, Text: "Where did the dog play with the red ball?"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "session.png")
	code, out, errs := ctl(t, "--socket", p.Socket, "explain", "--session", "0", "--png", path, "--json")
	if code != 0 || !strings.Contains(errs, "picture: "+path) {
		t.Fatalf("explain --png: %d %s", code, errs)
	}
	var ex struct {
		Parked int64 `json:"parked_tokens"`
		Hot    int64 `json:"hot_tokens"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if ex.Parked == 0 || ex.Hot == 0 {
		t.Fatalf("nothing parked, the picture would show no hot set: %s", out)
	}
	_, counts := decodePNG(t, path, parkedColor, hotColor, classColors[policy.ClassVolatile])
	if counts[parkedColor] < 1000 || counts[hotColor] < 100 || counts[classColors[policy.ClassVolatile]] < 1000 {
		t.Fatalf("pixels %v", counts)
	}
	if os.Getenv("CTXD_KEEP_PNG") != "" {
		data, _ := os.ReadFile(path)
		os.WriteFile(strings.TrimSuffix(os.Getenv("CTXD_KEEP_PNG"), ".png")+"-daemon.png", data, 0o644)
	}
}
