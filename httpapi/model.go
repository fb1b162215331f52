package httpapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
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
	sessionTokens  int  // a session's limit (hot set + arena, or the dense context): contextLength
	hot            bool // sessions run through a hot set
	weightsBytes   int64
	modified       time.Time
	tmpl           *chat.Template
}

// contextLength is the one context length every endpoint reports (models,
// show, ps, Anthropic's model info): the prompt a client may really send
// in one session, so agents compact only when ctxd would have to refuse.
// The model's trained window is reported beside it, never instead of it.
func (m *modelInfo) contextLength() int { return m.sessionTokens }

// modelCache asks the daemon once which model is loaded and makes its
// chat template; a call that finds no model forgets it.
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

// describe builds the model's info from a Status reply and the engine's
// facts of the model.
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
	// The chat template comes from the engine's facts of the model (the
	// daemon read it with the model); the door never opens the file. Facts
	// not available now (a model being swapped) fail this request and are
	// asked again by the next: only a template that is there and broken
	// selects the fallback, for the model's life.
	f, ok := s.backend.ModelFacts()
	if !ok {
		return nil, fmt.Errorf("%w: the loaded model's facts are not available yet (asked again at the next request)", protocol.ErrNoModel)
	}
	info := chat.ModelInfo{ChatTemplate: f.ChatTemplate, Architecture: f.Architecture, BOS: f.BOSText, EOS: f.EOSText}
	m.arch = f.Architecture
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

// model resolves a request's model field. ctxd serves one model, and
// serves it whatever name a request gives (agents send names of their
// own: Claude Code's side requests name a small model, Codex its default),
// as llama-server does; every answer reports the served model's id.
func (s *Server) model(ctx context.Context, name string) (*modelInfo, error) {
	m, err := s.models.get(ctx)
	if err != nil {
		return nil, err
	}
	if name != "" && name != m.id {
		s.log.Debug("request names another model; serving the loaded one", "asked", name, "served", m.id)
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
