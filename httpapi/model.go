package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/internal/gguf"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// modelInfo is what the endpoints say about the loaded model.
type modelInfo struct {
	id             string // the model id clients name
	path, digest   string
	description    string
	arch           string
	trainedContext int
	sessionTokens  int  // a session's limit (hot set + arena, or the dense context)
	hot            bool // sessions run through a hot set
	weightsBytes   int64
	modified       time.Time
	tmpl           *chat.Template
}

// matches reports whether a request's model field names this model: the
// id, the GGUF file's name or stem, each optionally with Ollama's ":latest";
// an empty field means the loaded model.
func (m *modelInfo) matches(name string) bool {
	name = strings.TrimSuffix(name, ":latest")
	base := filepath.Base(m.path)
	return name == "" || name == m.id || name == base || name == strings.TrimSuffix(base, filepath.Ext(base))
}

// modelCache asks the daemon once which model is loaded and reads its chat
// template from the GGUF file; a call that finds no model forgets it.
type modelCache struct {
	srv *Server
	mu  sync.Mutex
	cur *modelInfo
}

func (c *modelCache) get(ctx context.Context) (*modelInfo, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		return c.cur, nil
	}
	resp := c.srv.backend.Handle(ctx, c.srv.connID, &pb.Request{Body: &pb.Request_Status{Status: &pb.StatusRequest{}}}, nil)
	if resp.GetError() != nil {
		return nil, protocol.FromWire(resp.GetError())
	}
	st := resp.GetStatus()
	if st.GetModel() == nil {
		return nil, protocol.ErrNoModel
	}
	m, err := c.srv.describe(st)
	if err != nil {
		return nil, err
	}
	c.cur = m
	return m, nil
}

func (c *modelCache) forget() {
	c.mu.Lock()
	c.cur = nil
	c.mu.Unlock()
}

// describe builds the model's info from a Status reply and its GGUF file.
func (s *Server) describe(st *pb.StatusReply) (*modelInfo, error) {
	mi, capa := st.GetModel(), st.GetCapacity()
	m := &modelInfo{
		path: mi.GetPath(), digest: mi.GetDigest(), description: mi.GetDescription(),
		trainedContext: int(mi.GetTrainedContext()), sessionTokens: int(capa.GetSessionTokens()),
		hot: capa.GetHotTokens() > 0, weightsBytes: mi.GetWeightsBytes(),
	}
	if m.sessionTokens == 0 {
		m.sessionTokens = int(capa.GetContextTokens())
	}
	base := filepath.Base(m.path)
	m.id = s.cfg.ModelName
	if m.id == "" {
		m.id = strings.TrimSuffix(base, filepath.Ext(base))
	}
	if fi, err := os.Stat(m.path); err == nil {
		m.modified = fi.ModTime()
	}
	// A file that cannot be read now (out of descriptors, a transient I/O
	// error) fails this request and is read again by the next one: only a
	// template that is there and broken selects the fallback, for good.
	info := chat.ModelInfo{}
	f, err := s.openModel(m.path)
	switch {
	case err != nil && transientIO(err):
		return nil, fmt.Errorf("%w: reading the model's chat template from %s (tried again at the next request): %w", protocol.ErrInternal, m.path, err)
	case err != nil:
		s.log.Warn("reading the model's chat template; using the fallback template", "path", m.path, "err", err)
	default:
		info = templateInfo(f)
		m.arch = info.Architecture
	}
	t, err := chat.NewTemplate(info)
	if err != nil && info.ChatTemplate != "" {
		s.log.Error("the model's chat template is refused; using the fallback template", "err", err)
		info.ChatTemplate = ""
		t, err = chat.NewTemplate(info)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: chat template: %w", protocol.ErrInternal, err)
	}
	m.tmpl = t
	s.log.Info("HTTP model", "id", m.id, "template", t.Name(), "session_tokens", m.sessionTokens, "trained_context", m.trainedContext, "hot", m.hot)
	return m, nil
}

// templateInfo reads what chat.NewTemplate needs from GGUF metadata.
func templateInfo(f *gguf.File) chat.ModelInfo {
	var info chat.ModelInfo
	info.ChatTemplate, _ = f.String("tokenizer.chat_template")
	info.Architecture, _ = f.String("general.architecture")
	v, _ := f.Get("tokenizer.ggml.tokens")
	if arr, ok := v.(gguf.Array); ok {
		if toks, ok := arr.Strings(); ok {
			tok := func(key string) string {
				if id, ok := f.Uint(key); ok && id < uint64(len(toks)) {
					return toks[id]
				}
				return ""
			}
			info.BOS, info.EOS = tok("tokenizer.ggml.bos_token_id"), tok("tokenizer.ggml.eos_token_id")
		}
	}
	return info
}

// model resolves a request's model field.
func (s *Server) model(ctx context.Context, name string) (*modelInfo, error) {
	m, err := s.models.get(ctx)
	if err != nil {
		return nil, err
	}
	if !m.matches(name) {
		return nil, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "model_not_found",
			message: fmt.Sprintf("model %q not found: ctxd serves %q (GET /v1/models)", name, m.id), cause: ErrUnknownModel}
	}
	return m, nil
}

// noteError forgets the model when the daemon says none is loaded (it may
// have been unloaded or replaced through the socket).
func (s *Server) noteError(err error) {
	if errors.Is(err, protocol.ErrNoModel) {
		s.models.forget()
	}
}

// transientIO reports an error that passes by itself: out of descriptors
// or memory, an interrupted or failed read.
func transientIO(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS, syscall.EINTR, syscall.EAGAIN, syscall.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
