package sidecar_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/engine/enginefake"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// A decode that fails inside the engine midway through a prefill fails
// the call with a typed error and leaves tape and KV equal: the next
// EnsurePrefix repairs the session, which then continues as a clean run.
func TestFakeEngineFailureMidPrefill(t *testing.T) {
	for _, mode := range []string{"dense", "hot"} {
		t.Run(mode, func(t *testing.T) {
			cfg := sidecar.Config{ContextTokens: 1024, BatchTokens: 64, NoCold: true}
			if mode == "hot" {
				cfg = hotConfig()
				cfg.BatchTokens = 64
			}
			var calls, failAt atomic.Int64
			faults := &enginefake.Faults{Decode: func(n int, _ []engine.Token, _ int) error {
				calls.Add(1)
				if int64(n) == failAt.Load() {
					return engine.ErrDecode
				}
				return nil
			}}
			hay := ids(1, 900, 0, 250)
			m := manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay))

			clean := startFake(t, cfg, enginefake.Options{})
			c := clean.open("clean")
			clean.mustEnsure(c, m)
			clean.mustSuffix(c)
			want := clean.greedy(c, 8)

			d := startFake(t, cfg, enginefake.Options{Faults: faults})
			id := d.open("a")
			failAt.Store(calls.Load() + 3) // the third engine call of this prefill
			_, err := d.ensure(id, m)
			if !errors.Is(err, protocol.ErrInternal) {
				t.Fatalf("prefill with a failing decode: %v, want ErrInternal", err)
			}
			ex := d.explain(id)
			if ex.GetResidentTokens() == 0 || ex.GetResidentTokens() >= 901 {
				t.Fatalf("after the failure %d tokens resident: want the batches before it", ex.GetResidentTokens())
			}
			if mode == "dense" {
				if r := d.resident(); int64(len(r.Tokens)) != ex.GetResidentTokens() {
					t.Fatalf("engine holds %d tokens, tape %d", len(r.Tokens), ex.GetResidentTokens())
				}
			} else {
				checkHotLayout(t, d, id, withBOS(hay))
			}
			if r := d.mustEnsure(id, m); r.GetReusedTokens() == 0 || r.GetReusedTokens()+r.GetPrefilledTokens() != 901 {
				t.Fatalf("repair: %+v", r)
			}
			d.mustSuffix(id)
			if got := d.greedy(id, 8); !slices.Equal(got, want) {
				t.Fatalf("repaired session continues %v, clean run %v", got, want)
			}
		})
	}
}

// A prefill cancelled between batches answers CANCELLED and leaves a
// consistent, shorter tape.
func TestFakeCancelledPrefill(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	faults := &enginefake.Faults{Decode: func(n int, _ []engine.Token, _ int) error {
		if n == 6 {
			cancel() // seen by the engine's next batch or the daemon's next check
		}
		return nil
	}}
	d := startFake(t, sidecar.Config{ContextTokens: 1024, BatchTokens: 32, NoCold: true}, enginefake.Options{Faults: faults})
	id := d.open("a")
	hay := ids(2, 800, 0, 250)
	m := manifest(seg("hay", pb.SegmentKind_SEGMENT_KIND_TERMINAL, hay))
	req := &pb.Request{Body: &pb.Request_EnsurePrefix{EnsurePrefix: &pb.EnsurePrefixRequest{SessionId: id, Manifest: m}}}
	if _, err := d.callCtx(ctx, req, nil); !errors.Is(err, protocol.ErrCancelled) {
		t.Fatalf("cancelled prefill: %v, want ErrCancelled", err)
	}
	ex := d.explain(id)
	if r := d.resident(); int64(len(r.Tokens)) != ex.GetResidentTokens() || ex.GetResidentTokens() >= 801 {
		t.Fatalf("after cancel: engine %d tokens, tape %d", len(r.Tokens), ex.GetResidentTokens())
	}
	if r := d.mustEnsure(id, m); r.GetReusedTokens()+r.GetPrefilledTokens() != 801 {
		t.Fatalf("repair: %+v", r)
	}
}

// Bad input gets a typed error and loses nothing: a prompt larger than the
// context overflows before the KV is touched, and the session keeps what
// it held.
func TestFakeOverflowLeavesSessionUnchanged(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 256, NoCold: true}, enginefake.Options{})
	id := d.open("a")
	small := manifest(seg("s", pb.SegmentKind_SEGMENT_KIND_SYSTEM, ids(1, 100, 0, 250)))
	d.mustEnsure(id, small)
	before := d.resident().State
	_, err := d.ensure(id, manifest(seg("big", pb.SegmentKind_SEGMENT_KIND_SYSTEM, ids(2, 400, 0, 250))))
	var re *protocol.RemoteError
	if !errors.Is(err, protocol.ErrContextOverflow) || !errors.As(err, &re) || re.Overflow == nil || re.Overflow.ContextTokens != 256 {
		t.Fatalf("overflow: %v", err)
	}
	if got := d.resident().State; string(got) != string(before) {
		t.Fatal("an overflowing prompt changed the KV")
	}
	if r := d.mustEnsure(id, small); r.GetReusedTokens() != 101 {
		t.Fatalf("after overflow: %+v", r)
	}
}

// A model the engine cannot load fails New with the typed error; a
// missing file is NOT_FOUND; a daemon without an engine is a config error.
func TestFakeLoadFailures(t *testing.T) {
	bad := enginefake.New(enginefake.Options{Faults: &enginefake.Faults{Load: func(int) error {
		return engine.ErrBadModel
	}}})
	dir := t.TempDir()
	_, err := sidecar.New(context.Background(), sidecar.Config{Engine: bad, ModelPath: fakeModel(t), DataDir: filepath.Join(dir, "a"), NoCold: true})
	if !errors.Is(err, protocol.ErrBadModel) || !errors.Is(err, engine.ErrBadModel) {
		t.Fatalf("bad model: %v", err)
	}
	_, err = sidecar.New(context.Background(), sidecar.Config{Engine: enginefake.New(enginefake.Options{}), ModelPath: filepath.Join(dir, "none.gguf"), DataDir: filepath.Join(dir, "b"), NoCold: true})
	if !errors.Is(err, protocol.ErrNotFound) {
		t.Fatalf("missing model: %v", err)
	}
	if _, err := sidecar.New(context.Background(), sidecar.Config{DataDir: filepath.Join(dir, "c")}); !errors.Is(err, sidecar.ErrConfig) {
		t.Fatalf("no engine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = sidecar.New(ctx, sidecar.Config{Engine: enginefake.New(enginefake.Options{}), ModelPath: fakeModel(t), DataDir: filepath.Join(dir, "d"), NoCold: true})
	if !errors.Is(err, protocol.ErrCancelled) {
		t.Fatalf("cancelled start-up: %v", err)
	}
}

// A decode step the engine refuses as full ends the Decode with a typed
// error; the tokens generated before it stay and the session goes on.
func TestFakeContextFullDuringDecode(t *testing.T) {
	var full atomic.Bool
	faults := &enginefake.Faults{Decode: func(n int, toks []engine.Token, _ int) error {
		if full.Load() && len(toks) == 1 {
			return engine.ErrContextFull
		}
		return nil
	}}
	d := startFake(t, sidecar.Config{ContextTokens: 512, NoCold: true}, enginefake.Options{Faults: faults})
	id := d.open("a")
	m := manifest(seg("s", pb.SegmentKind_SEGMENT_KIND_SYSTEM, ids(1, 100, 0, 250)))
	d.mustEnsure(id, m)
	d.mustSuffix(id)
	full.Store(true)
	_, err := d.decode(id, 8)
	if !errors.Is(err, protocol.ErrResourceExhausted) {
		t.Fatalf("decode on a full engine: %v, want ErrResourceExhausted", err)
	}
	full.Store(false)
	ex := d.explain(id)
	if r := d.resident(); int64(len(r.Tokens)) != ex.GetResidentTokens() {
		t.Fatalf("engine %d tokens, tape %d", len(r.Tokens), ex.GetResidentTokens())
	}
	d.mustEnsure(id, m)
	d.mustSuffix(id)
	d.greedy(id, 4)
}

// A Decode whose caller goes away stops within a token: the reply says
// CANCELLED, every token it reported stays in the session (PROTOCOL.md),
// and the engine holds the tape.
func TestFakeDecodeCancelledWithinAToken(t *testing.T) {
	d := startFake(t, sidecar.Config{ContextTokens: 1024, NoCold: true}, enginefake.Options{})
	id := d.open("a")
	m := manifest(seg("s", pb.SegmentKind_SEGMENT_KIND_SYSTEM, ids(1, 100, 0, 250)))
	d.mustEnsure(id, m)
	d.mustSuffix(id)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []int32
	req := &pb.Request{Body: &pb.Request_Decode{Decode: &pb.DecodeRequest{SessionId: id, MaxTokens: 100}}}
	resp, err := d.callCtx(ctx, req, func(ev *pb.StreamEvent) error {
		if tok := ev.GetToken(); tok != nil {
			got = append(got, tok.GetToken())
			if len(got) == 3 {
				cancel()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rep := resp.GetDecode()
	if rep.GetReason() != pb.StopReason_STOP_REASON_CANCELLED || len(got) > 4 || int(rep.GetTokens()) != len(got) {
		t.Fatalf("cancelled decode: %v after %d streamed tokens", rep, len(got))
	}
	ex := d.explain(id)
	if n := ex.GetGeneratedTokens(); n != int64(len(got)) {
		t.Fatalf("%d generated tokens kept, %d streamed", ex.GetGeneratedTokens(), len(got))
	}
	if r := d.resident(); int64(len(r.Tokens)) != ex.GetResidentTokens() {
		t.Fatalf("engine %d tokens, tape %d", len(r.Tokens), ex.GetResidentTokens())
	}
}
