package httpapi

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
)

// scripted is a fake daemon for the adapter's own logic (tool-call
// streaming, keep-alive chunks): it "generates" a scripted text in the
// given pieces, as the daemon's Decode streams tokens, and takes
// prefillDelay for every EnsurePrefix.
type scripted struct {
	model        string
	pieces       []string
	prefillDelay time.Duration

	mu   sync.Mutex
	next uint64
	open int // sessions open now, and the most at once
	most int
}

// maxOpen is the most sessions that were open at once.
func (f *scripted) maxOpen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.most
}

func (f *scripted) NewConnID() uint64 { return 7 }

func (f *scripted) Handle(ctx context.Context, connID uint64, req *pb.Request, emit sidecar.Emitter) *pb.Response {
	switch b := req.Body.(type) {
	case *pb.Request_Status:
		return &pb.Response{Body: &pb.Response_Status{Status: &pb.StatusReply{
			Model:    &pb.ModelInfo{Path: f.model, TrainedContext: 512, Digest: "fake"},
			Capacity: &pb.Capacity{SessionTokens: 100000, HotTokens: 512, ContextTokens: 512}}}}
	case *pb.Request_OpenSession:
		f.mu.Lock()
		f.next++
		id := f.next
		f.open++
		f.most = max(f.most, f.open)
		f.mu.Unlock()
		return &pb.Response{Body: &pb.Response_OpenSession{OpenSession: &pb.OpenSessionReply{SessionId: id, ContextTokens: 100000}}}
	case *pb.Request_EnsurePrefix:
		if b.EnsurePrefix.GetProgress() && emit != nil {
			emit(&pb.StreamEvent{Body: &pb.StreamEvent_Progress{Progress: &pb.ProgressEvent{Phase: "prefill", Total: 100}}})
		}
		select {
		case <-time.After(f.prefillDelay):
		case <-ctx.Done():
			return &pb.Response{Error: &pb.Error{Code: pb.ErrorCode_ERROR_CODE_CANCELLED}}
		}
		return &pb.Response{Body: &pb.Response_EnsurePrefix{EnsurePrefix: &pb.PrefixReply{PromptTokens: 90, PrefilledTokens: 90}}}
	case *pb.Request_PrefillSuffix:
		return &pb.Response{Body: &pb.Response_PrefillSuffix{PrefillSuffix: &pb.PrefixReply{PromptTokens: 100, PrefilledTokens: 10}}}
	case *pb.Request_Decode:
		var text strings.Builder
		reply := &pb.DecodeReply{Reason: pb.StopReason_STOP_REASON_END_OF_GENERATION}
		for _, p := range f.pieces {
			if !b.Decode.GetNoStream() {
				if err := emit(&pb.StreamEvent{Body: &pb.StreamEvent_Token{Token: &pb.TokenEvent{Piece: p}}}); err != nil {
					reply.Reason = pb.StopReason_STOP_REASON_CANCELLED
					break
				}
			}
			text.WriteString(p)
			reply.Tokens++
			cut := -1
			for _, s := range b.Decode.GetStop() {
				if i := strings.Index(text.String(), s); i >= 0 && (cut < 0 || i < cut) {
					cut = i
				}
			}
			if cut >= 0 {
				reply.Text, reply.Reason = text.String()[:cut], pb.StopReason_STOP_REASON_STOP_STRING
				return &pb.Response{Body: &pb.Response_Decode{Decode: reply}}
			}
		}
		reply.Text = text.String()
		return &pb.Response{Body: &pb.Response_Decode{Decode: reply}}
	case *pb.Request_CloseSession:
		f.mu.Lock()
		f.open--
		f.mu.Unlock()
		return &pb.Response{Body: &pb.Response_CloseSession{CloseSession: &pb.CloseSessionReply{}}}
	}
	return &pb.Response{Error: &pb.Error{Code: pb.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "scripted: not scripted"}}
}

// noBackend is a backend that is never called.
type noBackend struct{}

func (noBackend) NewConnID() uint64 { return 1 }
func (noBackend) Handle(context.Context, uint64, *pb.Request, sidecar.Emitter) *pb.Response {
	return &pb.Response{Error: &pb.Error{Code: pb.ErrorCode_ERROR_CODE_NO_MODEL}}
}

// CountTokens counts a token per 4 bytes of text, as no tokenizer is
// scripted.
func (f *scripted) CountTokens(_ context.Context, m policy.Manifest) (int, error) {
	n := 0
	for _, s := range m.Segments {
		n += (len(s.Text) + 3) / 4
	}
	return n, nil
}

func (noBackend) CountTokens(context.Context, policy.Manifest) (int, error) {
	return 0, protocol.ErrNoModel
}

// ModelFacts are stories260K's: no chat template (the fallback, with
// Hermes tool calls).
func (f *scripted) ModelFacts() (engine.Facts, bool) {
	return engine.Facts{Path: f.model, Architecture: "llama", BOSText: "<s>", EOSText: "</s>"}, true
}

func (noBackend) ModelFacts() (engine.Facts, bool) { return engine.Facts{}, false }
