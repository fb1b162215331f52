package sidecar_test

// Unit tests of the daemon on engine/enginefake: the daemon as a program
// embedding it sees it (sidecar.New, Server.Handle with the wire's
// messages, as httpapi drives it), with a pure-Go engine whose logits
// depend on every token, position and stored state of the KV, so a wrong
// layout changes what comes next. They run in seconds:
//
//	go test ./sidecar -run Fake     (or: make test-fake)
//
// The same behaviours on real models over the socket are the integration
// tests beside them.

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// fakeDaemon is a daemon on the fake engine, reached in process.
type fakeDaemon struct {
	t    *testing.T
	srv  *sidecar.Server
	eng  *enginefake.Backend
	cfg  sidecar.Config
	conn uint64
}

// fakeModel writes a model file the fake engine "loads": its bytes are
// only hashed, for the digest that keys KV and snapshots.
func fakeModel(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake.gguf")
	if err := os.WriteFile(p, []byte("enginefake model v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startFake starts a daemon with cfg on a fake engine with o. Unset
// fields get a model file, temporary folders, no latency bound and no idle
// snapshots.
func startFake(t *testing.T, cfg sidecar.Config, o enginefake.Options) *fakeDaemon {
	t.Helper()
	if cfg.ModelPath == "" {
		cfg.ModelPath = fakeModel(t)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = filepath.Join(t.TempDir(), "data")
	}
	cfg.SocketPath = filepath.Join(t.TempDir(), "ctxd.sock")
	if cfg.TurnLatency == 0 {
		cfg.TurnLatency = -1
	}
	if cfg.IdleSnapshot == 0 {
		cfg.IdleSnapshot = -1
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("CTXD_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	eng := enginefake.New(o)
	cfg.Engine = eng
	srv, err := sidecar.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{t: t, srv: srv, eng: eng, cfg: cfg, conn: srv.NewConnID()}
	t.Cleanup(func() { d.stop() })
	return d
}

// restart stops d and starts a daemon on the same data directory and
// model file, on a fresh fake engine.
func (d *fakeDaemon) restart() *fakeDaemon {
	d.t.Helper()
	d.stop()
	return startFake(d.t, d.cfg, d.eng.Options())
}

func (d *fakeDaemon) stop() {
	if d.srv != nil {
		if err := d.srv.Close(); err != nil {
			d.t.Errorf("close: %v", err)
		}
		d.srv = nil
	}
}

// call sends req and returns the reply, or the wire error as a typed one.
func (d *fakeDaemon) call(req *pb.Request, emit sidecar.Emitter) (*pb.Response, error) {
	d.t.Helper()
	return d.callCtx(context.Background(), req, emit)
}

func (d *fakeDaemon) callCtx(ctx context.Context, req *pb.Request, emit sidecar.Emitter) (*pb.Response, error) {
	resp := d.srv.Handle(ctx, d.conn, req, emit)
	if e := resp.GetError(); e != nil {
		return nil, protocol.FromWire(e)
	}
	return resp, nil
}

func (d *fakeDaemon) must(resp *pb.Response, err error) *pb.Response {
	d.t.Helper()
	if err != nil {
		d.t.Fatal(err)
	}
	return resp
}

func (d *fakeDaemon) open(name string) uint64 {
	d.t.Helper()
	r := d.must(d.call(&pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{Name: name}}}, nil))
	return r.GetOpenSession().GetSessionId()
}

func (d *fakeDaemon) openWith(name string, m *pb.Manifest) (uint64, *pb.PrefixReply) {
	d.t.Helper()
	r := d.must(d.call(&pb.Request{Body: &pb.Request_OpenSession{OpenSession: &pb.OpenSessionRequest{Name: name, Manifest: m}}}, nil))
	return r.GetOpenSession().GetSessionId(), r.GetOpenSession().GetPrefix()
}

func (d *fakeDaemon) ensure(id uint64, m *pb.Manifest) (*pb.PrefixReply, error) {
	d.t.Helper()
	r, err := d.call(&pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{SessionId: id, Manifest: m}}}, nil)
	return r.GetEnsurePrefix(), err
}

func (d *fakeDaemon) mustEnsure(id uint64, m *pb.Manifest) *pb.PrefixReply {
	d.t.Helper()
	r, err := d.ensure(id, m)
	if err != nil {
		d.t.Fatal(err)
	}
	return r
}

func (d *fakeDaemon) suffix(id uint64, extra ...*pb.Segment) (*pb.PrefixReply, error) {
	d.t.Helper()
	r, err := d.call(&pb.Request{Body: &pb.Request_PrefillSuffix{PrefillSuffix: &pb.PrefillSuffixRequest{SessionId: id, Extra: extra}}}, nil)
	return r.GetPrefillSuffix(), err
}

func (d *fakeDaemon) mustSuffix(id uint64, extra ...*pb.Segment) *pb.PrefixReply {
	d.t.Helper()
	r, err := d.suffix(id, extra...)
	if err != nil {
		d.t.Fatal(err)
	}
	return r
}

// decode generates up to n greedy tokens and returns them.
func (d *fakeDaemon) decode(id uint64, n int) ([]int32, error) {
	d.t.Helper()
	var out []int32
	_, err := d.call(&pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: id, MaxTokens: int32(n)}}},
		func(ev *pb.StreamEvent) error {
			if tok := ev.GetToken(); tok != nil {
				out = append(out, tok.GetToken())
			}
			return nil
		})
	return out, err
}

func (d *fakeDaemon) greedy(id uint64, n int) []int32 {
	d.t.Helper()
	out, err := d.decode(id, n)
	if err != nil {
		d.t.Fatal(err)
	}
	if len(out) == 0 {
		d.t.Fatal("decode produced no token")
	}
	return out
}

func (d *fakeDaemon) explain(id uint64) *pb.ExplainReply {
	d.t.Helper()
	return d.must(d.call(&pb.Request{Body: &pb.Request_Explain{Explain: &pb.ExplainRequest{SessionId: id}}}, nil)).GetExplain()
}

func (d *fakeDaemon) snapshot(id uint64, name string) *pb.SnapshotReply {
	d.t.Helper()
	return d.must(d.call(&pb.Request{Body: &pb.Request_Snapshot{Snapshot: &pb.SnapshotRequest{SessionId: id, Name: name}}}, nil)).GetSnapshot()
}

func (d *fakeDaemon) restore(id uint64, name string) (*pb.RestoreReport, error) {
	d.t.Helper()
	r, err := d.call(&pb.Request{Body: &pb.Request_Restore{Restore: &pb.RestoreRequest{SessionId: id, Name: name}}}, nil)
	return r.GetRestore().GetReport(), err
}

func (d *fakeDaemon) reportEdit(id uint64, paths ...string) *pb.ReportEditReply {
	d.t.Helper()
	return d.must(d.call(&pb.Request{Body: &pb.Request_ReportEdit{ReportEdit: &pb.ReportEditRequest{SessionId: id, Paths: paths}}}, nil)).GetReportEdit()
}

func (d *fakeDaemon) closeSession(id uint64) {
	d.t.Helper()
	d.must(d.call(&pb.Request{Body: &pb.Request_CloseSession{CloseSession: &pb.CloseSessionRequest{SessionId: id}}}, nil))
}

// resident is what the fake engine holds now.
func (d *fakeDaemon) resident() enginefake.Resident {
	d.t.Helper()
	r, ok := d.eng.Resident()
	if !ok {
		d.t.Fatal("no engine context")
	}
	return r
}

// ids are n pseudo-random byte tokens from [lo, hi) (the fake's
// vocabulary holds bytes as tokens 3..258).
func ids(seed uint64, n int, lo, hi byte) []int32 {
	rng := rand.New(rand.NewPCG(seed, 11))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(enginefake.ByteToken(lo + byte(rng.IntN(int(hi-lo)))))
	}
	return out
}

func seg(id string, kind pb.SegmentKind, toks []int32) *pb.Segment {
	return &pb.Segment{Id: id, Kind: kind, Stable: true, Tokens: toks}
}

func manifest(segs ...*pb.Segment) *pb.Manifest { return &pb.Manifest{Segments: segs} }

// withBOS is a session's token stream: BOS, then the given tokens.
func withBOS(toks ...[]int32) []int32 {
	out := []int32{int32(enginefake.TokBOS)}
	for _, t := range toks {
		out = append(out, t...)
	}
	return out
}

// checkHotLayout holds the engine to what Explain says: the hot ranges'
// tokens, and nothing else, occupy positions [0, hot) without a hole
// (compaction), each range a run of consecutive positions.
func checkHotLayout(t *testing.T, d *fakeDaemon, id uint64, stream []int32) *pb.ExplainReply {
	t.Helper()
	ex := d.explain(id)
	r := d.resident()
	if int64(len(r.Positions)) != ex.GetHotTokens() {
		t.Fatalf("engine holds %d tokens, explain says %d hot", len(r.Positions), ex.GetHotTokens())
	}
	for i, p := range r.Positions {
		if p != i {
			t.Fatalf("engine positions have a hole at %d (position %d): not compacted", i, p)
		}
	}
	// Every hot range's tokens appear as one run in the engine; the runs
	// together are the whole engine.
	used := make([]bool, len(r.Tokens))
	total := 0
	for _, hr := range ex.GetHotRanges() {
		want := stream[hr.GetStart():hr.GetEnd()]
		total += len(want)
		found := false
		for p := 0; p+len(want) <= len(r.Tokens) && !found; p++ {
			if used[p] {
				continue
			}
			ok := true
			for k, w := range want {
				if int32(r.Tokens[p+k]) != w {
					ok = false
					break
				}
			}
			if ok {
				found = true
				for k := range want {
					used[p+k] = true
				}
			}
		}
		if !found {
			t.Fatalf("hot range [%d,%d) is not a run in the engine", hr.GetStart(), hr.GetEnd())
		}
	}
	if total != len(r.Tokens) {
		t.Fatalf("hot ranges hold %d tokens, the engine %d", total, len(r.Tokens))
	}
	return ex
}
