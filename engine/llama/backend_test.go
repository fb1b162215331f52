package llama

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"strings"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
)

// loadOnTestBackend loads path on the CPU, or with CTXD_BACKEND set, with
// every layer on that backend's device; it fails unless the weights, the
// output head and (checked by newCtx's callers) the KV really went there.
func loadOnTestBackend(t *testing.T, path string) *Model {
	t.Helper()
	name, dir := testmodel.Backend(t)
	if name == "" {
		m, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}
	if err := LoadBackends(dir); err != nil {
		t.Fatalf("CTXD_BACKEND=%s: %v", name, err)
	}
	dev, ok, reason, err := ChooseDevice(name)
	if err != nil || !ok {
		t.Fatalf("CTXD_BACKEND=%s: no device (%s %v); Mesa's lavapipe is only listed with GGML_VK_VISIBLE_DEVICES=0", name, reason, err)
	}
	m, err := LoadWith(path, engine.ModelOptions{Device: dev.Name, GPULayers: engine.AllLayers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	p := m.Facts().Placement
	if p.Device.Name != dev.Name || p.GPULayers != m.Facts().Layers || !p.OutputOnGPU || p.DeviceWeightsBytes == 0 {
		t.Fatalf("CTXD_BACKEND=%s: layers not offloaded to %s: placement %+v", name, dev.Name, p)
	}
	return m
}

func TestReadLayout(t *testing.T) {
	path := testmodel.Stories(t)
	l, err := ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := m.Facts()
	if l.Layers != f.Layers || l.KVHeads != f.KVHeads || l.HeadDim != f.HeadDim || l.VocabSize != f.VocabSize || l.TrainedContext != f.TrainedContext || l.Embd != f.Embd {
		t.Fatalf("layout %+v disagrees with facts %+v", l, f)
	}
	var sum int64
	for i, b := range l.LayerBytes {
		if b <= 0 {
			t.Fatalf("layer %d: %d bytes", i, b)
		}
		sum += b
	}
	sum += l.InputBytes
	if l.OutputBytes != l.InputBytes { // stories260K ties its output head to the embeddings
		sum += l.OutputBytes
	}
	if sum != f.WeightsBytes {
		t.Fatalf("layout sums to %d bytes, llama.cpp reports %d", sum, f.WeightsBytes)
	}
	if p := f.Placement; p.Device.Name != "" || p.HostWeightsBytes == 0 {
		t.Fatalf("CPU load placement %+v", p)
	}
}

// TestDeviceMatchesCPU: on a GPU backend, greedy tokens equal the CPU
// backend's, the KV is on the device, and a sequence saved on one backend
// loads on the other with next-token logits that differ by the reported
// amount at most. Without CTXD_BACKEND it checks that a CPU load reports
// nothing on a device.
func TestDeviceMatchesCPU(t *testing.T) {
	dm := loadStories(t)
	cm, err := Load(testmodel.Stories(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	dc, cc := newCtx(t, dm, 256), newCtx(t, cm, 256)
	name, _ := testmodel.Backend(t)
	if mem := dc.Memory(); name != "" && (mem.DeviceKVBytes == 0 || mem.HostKVBytes != 0) {
		t.Fatalf("KV not on the device: %+v", mem)
	} else if name == "" && (mem.DeviceKVBytes != 0 || mem.HostKVBytes == 0) {
		t.Fatalf("CPU context memory %+v", mem)
	}
	prompt, err := dm.Tokenize("Once upon a time, there was a", true)
	if err != nil {
		t.Fatal(err)
	}
	dt, ct := greedy(t, dc, prompt, 0, 16), greedy(t, cc, prompt, 0, 16)
	if !equalTokens(dt, ct) {
		t.Fatalf("device greedy %q != CPU %q", text(dm, dt), text(cm, ct))
	}
	// Cross-backend state: save on each, load on the other, compare the
	// next-token logits with the source's.
	ds, err := dc.SaveSeq()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cc.SaveSeq()
	if err != nil {
		t.Fatal(err)
	}
	next := dt[len(dt)-1]
	pos := len(prompt) + len(dt)
	nextLogits := func(c *Context, s engine.SeqState) []float32 {
		c.Clear()
		if err := c.LoadSeq(s); err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(t.Context(), []engine.Token{next}, pos); err != nil {
			t.Fatal(err)
		}
		return append([]float32(nil), c.Logits()...)
	}
	ref := nextLogits(cc, cs)   // CPU state on CPU
	onDev := nextLogits(dc, cs) // CPU state on the device
	back := nextLogits(cc, ds)  // device state on the CPU
	same := nextLogits(dc, ds)  // device state on the device
	again := nextLogits(dc, ds) // and once more: bitwise on one backend
	if !bytes.Equal(f32bytes(same), f32bytes(again)) {
		t.Fatal("device state reloaded on the device gives different logits")
	}
	t.Logf("backend %q: max |logit diff| CPU state on device %.4g, device state on CPU %.4g, device vs CPU %.4g",
		name, maxDiff(ref, onDev), maxDiff(ref, back), maxDiff(ref, same))
	if d := maxDiff(ref, onDev); d > 0.05 {
		t.Fatalf("CPU state on the device: logits differ by %g", d)
	}
	if d := maxDiff(ref, back); d > 0.05 {
		t.Fatalf("device state on the CPU: logits differ by %g", d)
	}
	if name == "" && maxDiff(ref, same) != 0 {
		t.Fatal("two CPU loads disagree")
	}
}

func TestChooseDeviceCPU(t *testing.T) {
	d, ok, reason, err := ChooseDevice(policy.DeviceCPU)
	if err != nil || ok || d.Name != "" || !strings.Contains(reason, "cpu") {
		t.Fatalf("ChooseDevice(cpu) = %+v %v %q %v", d, ok, reason, err)
	}
	if _, _, _, err := ChooseDevice("NoSuchGPU7"); err == nil {
		t.Fatal("unknown device accepted")
	}
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		u := math.Float32bits(x)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
	}
	return b
}

// shiftTolerance bounds the logit difference a position shift may cause:
// a shift re-rotates K (RoPE) in place, and a GPU backend computes it at
// its own precision (0.0026 measured on Vulkan over lavapipe, against
// < 1e-3 on the CPU). Moves of bytes stay bitwise on every backend.
func shiftTolerance(t *testing.T) float32 {
	if name, _ := testmodel.Backend(t); name != "" {
		return 1e-2
	}
	return 1e-3
}

// TestReusedCellsLeakNothing: tokens decoded into cells that an earlier,
// removed sequence used give the logits of a fresh context.
func TestReusedCellsLeakNothing(t *testing.T) {
	m := loadStories(t)
	ctx := t.Context()
	a, _ := m.Tokenize("The sun was warm and the sky was blue. Tom had a red kite.", true)
	b, _ := m.Tokenize("One day, Lily saw a big red ball.", true)
	fresh := newCtx(t, m, 2048)
	if err := fresh.Decode(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	ref := append([]float32(nil), fresh.Logits()...)
	c := newCtx(t, m, 2048)
	if err := c.Decode(ctx, a, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExtractRange(0, len(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Remove(0, -1); err != nil {
		t.Fatal(err)
	}
	if err := c.Decode(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(ref, c.Logits()); d > 1e-3 {
		t.Fatalf("after a removed sequence, logits differ by %g", d)
	}
	// Parking (save, clear) and decoding again, as the sidecar does when a
	// second session becomes resident.
	if _, err := c.SaveSeq(); err != nil {
		t.Fatal(err)
	}
	c.Clear()
	if err := c.Decode(ctx, b, 0); err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(ref, c.Logits()); d > 1e-3 {
		t.Fatalf("after a saved and cleared sequence, logits differ by %g", d)
	}
}

// TestRepeatedTurnsAreExact mirrors the sidecar: a probe batch extracted
// and cleared at load, then the same turn (two prefills and single-token
// steps) run again and again, the earlier one parked (saved, cleared) each
// time; every run gives the first run's logits exactly. (On Mesa 22.3's
// lavapipe with several rasterizer threads this failed in 3 of 5 runs, by
// up to 5.9 and once NaN, also without the probe and the save: a race in
// the software driver; LP_NUM_THREADS=1 passed 5 of 5, so .ci/run pins it.)
func TestRepeatedTurnsAreExact(t *testing.T) {
	m := loadStories(t)
	c, err := m.newContext(engine.ContextOptions{ContextTokens: 2048, BatchTokens: 512, DecodeThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	probe := make([]engine.Token, 64)
	for i := range probe {
		probe[i] = engine.Token(3 + i)
	}
	if err := c.Decode(ctx, probe, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExtractRange(0, 64); err != nil {
		t.Fatal(err)
	}
	c.Clear()
	a, _ := m.Tokenize("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her dog Max.", true)
	b, _ := m.Tokenize(" One day, Lily saw a big red ball.", false)
	var first [][]float32
	for run := 0; run < 4; run++ {
		if run > 0 {
			if _, err := c.SaveSeq(); err != nil {
				t.Fatal(err)
			}
			c.Clear()
		}
		if err := c.Decode(ctx, a, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.Decode(ctx, b, len(a)); err != nil {
			t.Fatal(err)
		}
		var got [][]float32
		got = append(got, append([]float32(nil), c.Logits()...))
		s, _ := c.NewSampler(engine.SamplingParams{})
		for i := 0; i < 12; i++ {
			tok := c.Sample(s)
			if err := c.Decode(ctx, []engine.Token{tok}, len(a)+len(b)+i); err != nil {
				t.Fatal(err)
			}
			got = append(got, append([]float32(nil), c.Logits()...))
		}
		s.Close()
		if run == 0 {
			first = got
			continue
		}
		for i := range got {
			if d := maxDiff(first[i], got[i]); d != 0 {
				t.Fatalf("run %d step %d: logits differ from the first run by %g", run, i, d)
			}
		}
	}
}

// TestReadLayoutKeepsTheCause: a model file that cannot be read is
// ErrBadModel and still says why (errors.Is reaches the cause).
func TestReadLayoutKeepsTheCause(t *testing.T) {
	_, err := ReadLayout(t.TempDir() + "/missing.gguf")
	if !errors.Is(err, engine.ErrBadModel) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadLayout of a missing file: %v", err)
	}
}
