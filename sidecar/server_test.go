package sidecar

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

type testServer struct {
	srv    *Server
	socket string
	cfg    Config
	done   chan error
	cancel context.CancelFunc
	stop   func() // ends Serve and closes the server (once)
}

func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	dir := t.TempDir()
	if cfg.ModelPath == "" {
		cfg.ModelPath = testmodel.Stories(t)
	}
	if cfg.ContextTokens == 0 {
		cfg.ContextTokens = 2048
	}
	if cfg.SocketPath == "" {
		cfg.SocketPath = filepath.Join(dir, "s", "ctxd.sock")
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(dir, "data")
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Engine == nil {
		cfg.Engine = llama.Backend{}
	}
	backend, backendDir := testmodel.Backend(t)
	if backend != "" && cfg.Device == "" {
		cfg.BackendDir, cfg.Device = backendDir, backend
	} else {
		backend = "" // the test chose the device itself
	}
	srv, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p := srv.slot.facts.Placement; backend != "" && srv.slot.model != nil &&
		(p.GPULayers != srv.slot.facts.Layers || !p.OutputOnGPU || srv.slot.ectx.Memory().DeviceKVBytes == 0) {
		srv.Close()
		t.Fatalf("CTXD_BACKEND=%s: model not offloaded: placement %+v, context memory %+v (%s)", backend, p, srv.slot.ectx.Memory(), srv.slot.deviceReason)
	}
	ln, err := srv.Listen()
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ts := &testServer{srv: srv, socket: cfg.SocketPath, cfg: cfg, done: make(chan error, 1), cancel: cancel}
	go func() { ts.done <- srv.Serve(ctx, ln) }()
	ts.stop = sync.OnceFunc(func() {
		cancel()
		select {
		case <-ts.done:
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return after cancel")
		}
		srv.Close()
	})
	t.Cleanup(ts.stop)
	return ts
}

func dial(t *testing.T, ts *testServer) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func openSession(t *testing.T, c *client.Client) *client.Session {
	t.Helper()
	s, err := c.OpenSession(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// manifest builds a stories-flavoured agent prompt: stable system and task,
// then turns of which the last is the volatile suffix.
func manifest(turns ...string) client.Manifest {
	m := client.Manifest{Segments: []client.Segment{
		{ID: "system", Kind: client.KindSystem, Text: "Once upon a time, there was a little girl named Lily.", Stable: true},
		{ID: "task", Kind: client.KindPinned, Text: " She loved to play outside in the park with her dog Max.", Stable: true},
	}}
	for i, t := range turns {
		m.Segments = append(m.Segments, client.Segment{
			ID: "turn" + string(rune('a'+i)), Kind: client.KindUserTurn, Text: t, Stable: i < len(turns)-1,
		})
	}
	return m
}

type turnResult struct {
	ensure, suffix client.PrefixResult
	tokens         []int32
	logits         [][]float32
}

func runTurn(t *testing.T, s *client.Session, m client.Manifest, n int) turnResult {
	t.Helper()
	ctx := context.Background()
	var r turnResult
	var err error
	if r.ensure, err = s.EnsurePrefix(ctx, m); err != nil {
		t.Fatal(err)
	}
	if r.suffix, err = s.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = s.Decode(ctx, client.DecodeOptions{MaxTokens: n, ReturnLogits: true}, func(tok client.Token) error {
		r.tokens = append(r.tokens, tok.ID)
		r.logits = append(r.logits, tok.Logits)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWarmEqualsCold(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	warm := openSession(t, c)
	turns := []string{
		" One day, Lily saw a big red ball.",
		" She ran to get it, but the ball rolled away.",
		" Max barked and ran after the ball too.",
		" They played together until the sun went down.",
	}
	var prev turnResult
	for i := 1; i <= len(turns); i++ {
		m := manifest(turns[:i]...)
		w := runTurn(t, warm, m, 12)
		total := w.suffix.PromptTokens
		if i > 1 {
			// Everything before this turn's new text was held: the previous
			// prompt is reused whole (its generated tokens are dropped).
			prevPrompt := prev.suffix.PromptTokens
			reused := w.ensure.ReusedTokens + w.suffix.ReusedTokens
			if reused < prevPrompt || reused != w.ensure.ReusableTokens+w.suffix.ReusableTokens {
				t.Fatalf("turn %d: reused %d, reusable %d+%d, previous prompt %d", i, reused, w.ensure.ReusableTokens, w.suffix.ReusableTokens, prevPrompt)
			}
			if reused+w.ensure.PrefilledTokens+w.suffix.PrefilledTokens != total {
				t.Fatalf("turn %d: reused %d + prefilled %d+%d != prompt %d", i, reused, w.ensure.PrefilledTokens, w.suffix.PrefilledTokens, total)
			}
		}
		cold, _, err := c.OpenSessionOptions(context.Background(), client.SessionOptions{Name: "cold", Cold: true})
		if err != nil {
			t.Fatal(err)
		}
		cr := runTurn(t, cold, m, 12)
		if err := cold.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if cr.ensure.ReusedTokens != 0 || cr.suffix.PrefilledTokens+cr.ensure.PrefilledTokens != total {
			t.Fatalf("turn %d: cold session reused tokens: %+v %+v", i, cr.ensure, cr.suffix)
		}
		if !equal(w.tokens, cr.tokens) {
			t.Fatalf("turn %d: warm %v != cold %v", i, w.tokens, cr.tokens)
		}
		// Chunked prefill runs other matmul kernels than one batch, so logits
		// differ in the last bits; greedy tokens must not.
		if d := maxAbsDiff(w.logits[0], cr.logits[0]); d > 0.02 {
			t.Fatalf("turn %d: first-step logits differ by %g", i, d)
		}
		prev = w
	}
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func maxAbsDiff(a, b []float32) float32 {
	var d float32
	for i := range a {
		x := a[i] - b[i]
		d = max(d, x, -x)
	}
	return d
}

// TestEditInvalidatesFromFirstChangedToken: changing a word inside the
// stable task segment keeps exactly the tokens before the change.
func TestEditInvalidatesFromFirstChangedToken(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	s := openSession(t, c)
	m := manifest(" One day, Lily saw a big red ball.", " She ran.")
	runTurn(t, s, m, 4)

	edited := manifest(" One day, Lily saw a big red ball.", " She ran.")
	edited.Segments[1].Text = strings.Replace(edited.Segments[1].Text, "park", "garden", 1)

	md, err := llama.Load(ts.cfg.ModelPath)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	sys, _ := md.Tokenize(m.Segments[0].Text, false)
	oldTask, _ := md.Tokenize(m.Segments[1].Text, false)
	newTask, _ := md.Tokenize(edited.Segments[1].Text, false)
	same := 0
	for same < len(oldTask) && same < len(newTask) && oldTask[same] == newTask[same] {
		same++
	}
	want := 1 + len(sys) + same // BOS + system + unchanged task tokens

	r, err := s.EnsurePrefix(context.Background(), edited)
	if err != nil {
		t.Fatal(err)
	}
	if r.ReusedTokens != want || r.ReusableTokens != want {
		t.Fatalf("reused %d reusable %d, want %d", r.ReusedTokens, r.ReusableTokens, want)
	}
	if r.DroppedTokens == 0 || r.PrefilledTokens != r.PromptTokens-want {
		t.Fatalf("result %+v", r)
	}
}

func TestOverflowIsTypedNeverTruncated(t *testing.T) {
	ts := startServer(t, Config{ContextTokens: 256})
	c := dial(t, ts)
	s := openSession(t, c)
	long := strings.Repeat(" The dog ran after the red ball in the park.", 40)
	_, err := s.EnsurePrefix(context.Background(), manifest(long, " end"))
	if !errors.Is(err, client.ErrContextOverflow) {
		t.Fatalf("err = %v", err)
	}
	var re *client.RemoteError
	if !errors.As(err, &re) || re.Overflow == nil || re.Overflow.ContextTokens != 256 || re.Overflow.PromptTokens <= 256 {
		t.Fatalf("overflow details missing: %#v", err)
	}
	// The session is untouched and still works.
	runTurn(t, s, manifest(" short"), 3)
}

func TestModelBusyWhileSessionsOpen(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	ctx := context.Background()
	s := openSession(t, c)
	if _, err := c.LoadModel(ctx, ts.cfg.ModelPath, 512); !errors.Is(err, client.ErrModelBusy) {
		t.Fatalf("load with open session: %v", err)
	}
	if err := c.UnloadModel(ctx); !errors.Is(err, client.ErrModelBusy) {
		t.Fatalf("unload with open session: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LoadModel(ctx, filepath.Join(t.TempDir(), "nope.gguf"), 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("missing model: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	os.WriteFile(bad, []byte("GGUF but not really a model file"), 0o600)
	if _, err := c.LoadModel(ctx, bad, 0); !errors.Is(err, client.ErrBadModel) {
		t.Fatalf("corrupt model: %v", err)
	}
	// A failed load keeps the old model.
	st, err := c.Status(ctx)
	if err != nil || st.Model == nil {
		t.Fatalf("status after failed load: %v %v", st, err)
	}
	r, err := c.LoadModel(ctx, ts.cfg.ModelPath, 512)
	if err != nil || r.Capacity.ContextTokens != 512 {
		t.Fatalf("reload: %v %v", r, err)
	}
	if err := c.UnloadModel(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenSession(ctx, "x"); !errors.Is(err, client.ErrNoModel) {
		t.Fatalf("open without model: %v", err)
	}
}

func TestSecondOwnerRefused(t *testing.T) {
	ts := startServer(t, Config{})
	_, err := New(context.Background(), Config{Engine: llama.Backend{}, DataDir: ts.cfg.DataDir, SocketPath: filepath.Join(t.TempDir(), "other.sock")})
	if !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second owner: %v", err)
	}
	// A second server on the same socket (other data dir) is refused too.
	other, err := New(context.Background(), Config{Engine: llama.Backend{}, DataDir: t.TempDir(), SocketPath: ts.socket})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Listen(); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second listener: %v", err)
	}
}

func TestLeaseLostFences(t *testing.T) {
	ts := startServer(t, Config{})
	if err := os.Remove(filepath.Join(ts.cfg.DataDir, "ctxd.lock")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ts.done:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Serve returned %v", err)
		}
		ts.done <- err
	case <-time.After(5 * time.Second):
		t.Fatal("server kept serving after losing its lease")
	}
}

func TestInvalidManifestLeavesSessionUsable(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	s := openSession(t, c)
	first := runTurn(t, s, manifest(" One day."), 4)
	bad := []client.Manifest{
		{},
		{Segments: []client.Segment{{ID: "a", Kind: client.KindUserTurn, Text: "x"}, {ID: "b", Kind: client.KindSystem, Text: "y", Stable: true}}},
		{Segments: []client.Segment{{ID: "a", Kind: 99, Text: "x"}}},
		{Segments: []client.Segment{{ID: "a", Kind: client.KindDiff, Text: "x", InvalidateOnEdit: true}}},
		{Template: "no-such-template", Segments: []client.Segment{{ID: "a", Kind: client.KindSystem, Text: "x"}}},
	}
	for i, m := range bad {
		if _, err := s.EnsurePrefix(context.Background(), m); !errors.Is(err, client.ErrInvalidManifest) {
			t.Errorf("manifest %d: err = %v", i, err)
		}
	}
	again := runTurn(t, s, manifest(" One day."), 4)
	if again.ensure.PrefilledTokens != 0 || !equal(first.tokens, again.tokens) {
		t.Fatalf("session changed by invalid manifests: %+v %v vs %v", again.ensure, first.tokens, again.tokens)
	}
}

func TestCancelDecodeWithinAToken(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	s := openSession(t, c)
	ctx := context.Background()
	if _, err := s.EnsurePrefix(ctx, manifest(" One day.")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	got := 0
	res, err := s.Decode(dctx, client.DecodeOptions{MaxTokens: 1000}, func(client.Token) error {
		got++
		if got == 5 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || res.Reason != client.StopCancelled {
		t.Fatalf("decode after cancel: %+v %v", res, err)
	}
	if got != 5 {
		t.Fatalf("%d tokens delivered after cancelling at 5", got)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if int(ex.GeneratedTokens) < got { // every delivered token stays (PROTOCOL.md)
		t.Fatalf("explain after cancel: generated %d, %d delivered", ex.GeneratedTokens, got)
	}
	// The session decodes again.
	if _, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 3}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestCancelInProcessStopsWithinOneToken: with no socket in between, a
// context cancelled while token 5 is emitted ends the decode at 5 tokens.
func TestCancelInProcessStopsWithinOneToken(t *testing.T) {
	ts := startServer(t, Config{})
	srv := ts.srv
	ctx := context.Background()
	open := srv.Handle(ctx, 0, &pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{}}}, nil)
	id := open.GetOpenSession().GetSessionId()
	m := protocol.ManifestToWire(policyManifest(manifest(" One day.")))
	srv.Handle(ctx, 0, &pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{SessionId: id, Manifest: m}}}, nil)
	srv.Handle(ctx, 0, &pb.Request{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{SessionId: id}}}, nil)
	dctx, cancel := context.WithCancel(ctx)
	n := 0
	r := srv.Handle(dctx, 0, &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: id, MaxTokens: 1000}}}, func(*pb.StreamEvent) error {
		if n++; n == 5 {
			cancel()
		}
		return nil
	})
	if r.GetDecode().GetReason() != pb.StopReason_STOP_REASON_CANCELLED || r.GetDecode().GetTokens() != 5 || n != 5 {
		t.Fatalf("reply %v after %d events", r, n)
	}
}

func TestStopStringAndExplain(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	s := openSession(t, c)
	ctx := context.Background()
	s.EnsurePrefix(ctx, manifest(" One day, Lily"))
	s.PrefillSuffix(ctx)
	res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: 200, Stop: []string{"."}}, nil)
	if err != nil || res.Reason != client.StopString || strings.Contains(res.Text, ".") || res.Text == "" {
		t.Fatalf("stop string: %+v %v", res, err)
	}
	ex, err := s.Explain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int
	for _, seg := range ex.Segments {
		sum += seg.Tokens
	}
	if sum != ex.ResidentTokens || ex.TokensByClass["task_pinned"] == 0 || ex.TokensByClass["volatile"] == 0 || ex.Capacity.ContextTokens != 2048 {
		t.Fatalf("explain: %v", ex)
	}
}

// TestTwoSessionsInterleave: sessions take turns on the one engine context;
// parking and restoring keeps each one exact.
func TestTwoSessionsInterleave(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	a, b := openSession(t, c), openSession(t, c)
	ma := manifest(" One day, Lily saw a cat.")
	mb := manifest(" Tom had a big blue car.")
	ra := runTurn(t, a, ma, 8)
	rb := runTurn(t, b, mb, 8)
	ma2 := manifest(" One day, Lily saw a cat.", " The cat was soft.")
	ra2 := runTurn(t, a, ma2, 8)
	if ra2.ensure.ReusedTokens+ra2.suffix.ReusedTokens < ra.suffix.PromptTokens {
		t.Fatalf("parked session lost its prefix: %+v %+v", ra2.ensure, ra2.suffix)
	}
	cold := openSession(t, c)
	if rc := runTurn(t, cold, ma2, 8); !equal(rc.tokens, ra2.tokens) {
		t.Fatalf("restored session %v != cold %v", ra2.tokens, rc.tokens)
	}
	_ = rb
}

func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	ts := startServer(t, Config{})
	good := dial(t, ts)
	s := openSession(t, good)

	cases := map[string][]byte{
		"garbage before hello": []byte("GET / HTTP/1.1\r\n\r\n"),
		"oversized frame":      {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 1, 0},
		"unknown type":         {0, 0, 0, 0, 0, 0, 0, 1, 9, 0},
	}
	for name, raw := range cases {
		nc, err := net.Dial("unix", ts.socket)
		if err != nil {
			t.Fatal(err)
		}
		nc.Write(raw)
		ch := protocol.NewChannel(nc, protocol.DefaultMaxFrame)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		h, payload, err := ch.ReadFrame()
		if err != nil {
			t.Fatalf("%s: no error frame: %v", name, err)
		}
		var resp pb.Response
		protocol.Unmarshal(h, payload, &resp)
		if h.StreamID != 0 || resp.GetError().GetCode() != pb.ErrorCode_ERROR_CODE_PROTOCOL {
			t.Fatalf("%s: got %v %v", name, h, resp.GetError())
		}
		if _, _, err := ch.ReadFrame(); err == nil {
			t.Fatalf("%s: connection stayed open", name)
		}
		nc.Close()
	}
	// A frame after a good handshake with a malformed payload.
	nc, _ := net.Dial("unix", ts.socket)
	ch := protocol.NewChannel(nc, protocol.DefaultMaxFrame)
	ch.WriteMessage(1, protocol.TypeRequest, 0, &pb.Request{Body: &pb.Request_Hello{Hello: &pb.HelloRequest{MinVersion: 1, MaxVersion: 1}}})
	ch.ReadFrame()
	ch.WriteFrame(protocol.Header{StreamID: 3, Type: protocol.TypeRequest}, []byte{0xff, 0xff, 0xff})
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if h, _, err := ch.ReadFrame(); err != nil || h.StreamID != 0 {
		t.Fatalf("malformed payload: %v %v", h, err)
	}
	nc.Close()

	// A version the server does not speak.
	nc, _ = net.Dial("unix", ts.socket)
	ch = protocol.NewChannel(nc, protocol.DefaultMaxFrame)
	ch.WriteMessage(1, protocol.TypeRequest, 0, &pb.Request{Body: &pb.Request_Hello{Hello: &pb.HelloRequest{MinVersion: 7, MaxVersion: 9}}})
	var resp pb.Response
	if _, err := ch.ReadMessage(&resp); err != nil || resp.GetError().GetCode() != pb.ErrorCode_ERROR_CODE_VERSION {
		t.Fatalf("version mismatch: %v %v", resp.GetError(), err)
	}
	nc.Close()

	// The good client and its session are unharmed.
	runTurn(t, s, manifest(" One day."), 3)
}

// TestClientVanishesMidDecode: a client that disappears while streaming
// loses its session; the daemon and other sessions carry on.
func TestClientVanishesMidDecode(t *testing.T) {
	ts := startServer(t, Config{})
	other := dial(t, ts)
	keep := openSession(t, other)
	before := runTurn(t, keep, manifest(" Tom had a big blue car."), 6)

	c, err := client.Dial(context.Background(), ts.socket)
	if err != nil {
		t.Fatal(err)
	}
	s := openSession(t, c)
	ctx := context.Background()
	s.EnsurePrefix(ctx, manifest(" One day."))
	s.PrefillSuffix(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Decode(ctx, client.DecodeOptions{MaxTokens: 1500}, func(tok client.Token) error {
			if tok.ID >= 0 {
				c.Close() // vanish mid-stream
			}
			return nil
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("decode did not end after the client vanished")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := other.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Sessions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vanished client's session still open: %d sessions", st.Sessions)
		}
		time.Sleep(20 * time.Millisecond)
	}
	after := runTurn(t, keep, manifest(" Tom had a big blue car."), 6)
	if !equal(before.tokens, after.tokens) {
		t.Fatalf("other session changed: %v vs %v", before.tokens, after.tokens)
	}
}

// TestTokenSegmentsAndTeacherForcing: a segment given as token ids equals
// its text; forcing the greedy tokens predicts exactly those tokens.
func TestTokenSegmentsAndTeacherForcing(t *testing.T) {
	ts := startServer(t, Config{})
	c := dial(t, ts)
	ctx := context.Background()
	a := openSession(t, c)
	text := manifest(" One day, Lily saw a big red ball.")
	greedyRun := runTurn(t, a, text, 8)

	md, err := llama.Load(ts.cfg.ModelPath)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	asTokens := manifest(" One day, Lily saw a big red ball.")
	for i := range asTokens.Segments {
		toks, _ := md.Tokenize(asTokens.Segments[i].Text, false)
		asTokens.Segments[i].Text = ""
		asTokens.Segments[i].Tokens = toks
	}
	b := openSession(t, c)
	if _, err := b.EnsurePrefix(ctx, asTokens); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PrefillSuffix(ctx); err != nil {
		t.Fatal(err)
	}
	var ids, predicted []int32
	_, err = b.Decode(ctx, client.DecodeOptions{MaxTokens: len(greedyRun.tokens), Forced: greedyRun.tokens}, func(tok client.Token) error {
		ids = append(ids, tok.ID)
		predicted = append(predicted, tok.Predicted)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !equal(ids, greedyRun.tokens) || !equal(predicted, greedyRun.tokens) {
		t.Fatalf("forced %v predicted %v, greedy %v", ids, predicted, greedyRun.tokens)
	}
	bad := manifest("x")
	bad.Segments[0].Tokens = []int32{1, 99999}
	if _, err := b.EnsurePrefix(ctx, bad); !errors.Is(err, client.ErrInvalidManifest) {
		t.Fatalf("out-of-vocabulary token: %v", err)
	}
	if _, err := b.Decode(ctx, client.DecodeOptions{MaxTokens: 3, Forced: []int32{1}}, nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("forced count mismatch: %v", err)
	}
}

// policyManifest converts a client manifest for the in-process Handle calls
// (the client does this inside; the daemon's side speaks policy).
func policyManifest(m client.Manifest) policy.Manifest {
	p := policy.Manifest{Template: m.Template}
	for _, s := range m.Segments {
		p.Segments = append(p.Segments, policy.Segment{
			ID: s.ID, Kind: policy.SegmentKind(s.Kind), Class: policy.CacheClass(s.Class), Text: s.Text, Tokens: s.Tokens,
			Stable: s.Stable, Paths: s.Paths, InvalidateOnEdit: s.InvalidateOnEdit, InvalidateOnTurn: s.InvalidateOnTurn,
		})
	}
	return p
}
