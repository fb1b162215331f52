package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
)

// Backend is the daemon as the door drives it: the same Handle the
// Unix-socket connections call, and a connection id of the door's own.
// *sidecar.Server implements it.
type Backend interface {
	Handle(ctx context.Context, connID uint64, req *pb.Request, emit func(*pb.StreamEvent) error) *pb.Response
	NewConnID() uint64
	// CountTokens is the number of tokens m's prompt takes with the loaded
	// model (BOS included), with nothing prefilled.
	CountTokens(ctx context.Context, m policy.Manifest) (int, error)
	// ModelFacts are the engine's facts of the loaded model (its chat
	// template among them); false when none is loaded.
	ModelFacts() (engine.Facts, bool)
}

// Server serves the HTTP APIs in front of one Backend.
type Server struct {
	cfg     Config
	log     *slog.Logger
	backend Backend
	connID  uint64
	peers   *peerCheck
	models  *modelCache
	table   *sessionTable
	mux     *http.ServeMux
	started time.Time
	primed  chan struct{} // closed once Serve has described the model (or failed to)

	mu sync.Mutex
	hs *http.Server
	// stopping is set when Serve ends: a stream cut then ends with an
	// error event (streamCut), not silently.
	stopping atomic.Bool
	guard    *guardListener
	wg       sync.WaitGroup // requests in flight
	end      context.CancelFunc
}

// New builds the door in front of backend.
func New(backend Backend, cfg Config) *Server {
	cfg.fill()
	s := &Server{cfg: cfg, log: cfg.Logger.With("api", "http"), backend: backend, started: time.Now(), primed: make(chan struct{})}
	s.connID = backend.NewConnID()
	s.peers = newPeerCheck(cfg.APIKey != "", s.log)
	s.models = &modelCache{srv: s}
	s.table = newSessionTable(s)
	if mc, ok := backend.(modelChanger); ok {
		mc.OnModelChange(s.table.closeIdle)
	}
	s.mux = http.NewServeMux()
	s.routes()
	return s
}

// Handler is the door as an http.Handler (tests, embedding).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Listen opens the listening socket: a loopback address unless an API key
// is configured.
func (s *Server) Listen() (net.Listener, error) {
	host, _, err := net.SplitHostPort(s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: http address %q: %v", ErrBadRequest, s.cfg.Addr, err)
	}
	if s.cfg.APIKey == "" && !isLoopbackHost(host) {
		return nil, fmt.Errorf("%w: http address %s is not loopback: set an API key (--api-key or CTXD_API_KEY) to serve other hosts", ErrForbidden, s.cfg.Addr)
	}
	if err := s.peers.start(); err != nil {
		return nil, err
	}
	return net.Listen("tcp", s.cfg.Addr)
}

// Serve answers HTTP on ln until ctx ends; then it stops accepting,
// cancels requests in flight and closes the door's sessions.
// Every connection passes the peer check and the connection caps when it
// is accepted, before a byte of it is read (listener.go).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.peers.start(); err != nil {
		ln.Close()
		return err
	}
	defer s.peers.close()
	// Requests derive from a context of the door's own, cancelled only
	// after stopping is set: a stream cut by the shutdown knows why.
	parent := ctx
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	guard := newGuardListener(ln, s.peers, s.log, s.cfg.MaxConns, s.cfg.MaxConnsPerPeer)
	ln = guard
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		ConnContext:       markAdmitted,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	s.hs, s.end, s.guard = hs, cancel, guard
	s.mu.Unlock()
	s.log.Info("serving HTTP (OpenAI and Ollama APIs)", "addr", ln.Addr().String(), "auth", map[bool]string{true: "api key", false: "loopback, same uid"}[s.cfg.APIKey != ""])
	// The model's template is read and tried on sample conversations now,
	// so a broken one is refused, with the reason, at start.
	go func() {
		defer close(s.primed)
		if _, err := s.models.get(ctx); err != nil {
			s.log.Debug("no model to describe yet", "err", err)
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var err error
	select {
	case <-parent.Done():
	case <-ctx.Done():
	case err = <-errc:
	}
	s.stopping.Store(true)
	cancel() // requests in flight end: their contexts derive from ctx
	t0 := time.Now()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	hs.Shutdown(sctx)
	scancel()
	s.wg.Wait()
	s.log.Debug("HTTP shut down", "took", time.Since(t0))
	s.table.closeAll(context.Background())
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/chat/completions", s.openaiChat)
	s.mux.HandleFunc("POST /v1/completions", s.openaiCompletions)
	s.mux.HandleFunc("GET /v1/models", s.openaiModels)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.openaiModel)
	s.mux.HandleFunc("POST /api/chat", s.ollamaChat)
	s.mux.HandleFunc("POST /api/generate", s.ollamaGenerate)
	s.mux.HandleFunc("GET /api/tags", s.ollamaTags)
	s.mux.HandleFunc("POST /api/show", s.ollamaShow)
	s.mux.HandleFunc("GET /api/version", s.ollamaVersion)
	s.mux.HandleFunc("GET /api/ps", s.ollamaPS)
	s.mux.HandleFunc("POST /v1/messages", s.anthropicMessages)
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.anthropicCountTokens)
	s.mux.HandleFunc("POST /v1/responses", s.responsesCreate)
	s.mux.HandleFunc("GET /v1/responses/{id}", s.responsesGet)
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ctxd is running\n") // Ollama clients probe /
	})
	s.mux.HandleFunc("HEAD /{$}", func(w http.ResponseWriter, r *http.Request) {})
}

// serveHTTP checks the peer and the key, bounds the body and routes.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.wg.Add(1)
	defer s.wg.Done()
	writeErr := errorWriter(r.URL.Path)
	if err := s.peers.allow(r, s.cfg.APIKey); err != nil {
		writeErr(w, err)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	if r.Body != http.NoBody {
		r.Body = newDeadlineBody(w, r.Body, s.cfg.BodyTimeout)
	}
	if _, pattern := s.mux.Handler(r); pattern == "" {
		writeErr(w, &apiError{status: http.StatusNotFound, typ: "invalid_request_error", code: "not_found",
			message: fmt.Sprintf("%s %s is not an endpoint of ctxd (OpenAI: /v1/chat/completions, /v1/completions, /v1/responses, /v1/models; Anthropic: /v1/messages, /v1/messages/count_tokens; Ollama: /api/chat, /api/generate, /api/tags, /api/show, /api/version, /api/ps)", r.Method, r.URL.Path),
			cause:   ErrNotFound})
		return
	}
	r, err := withReuse(r)
	if err != nil {
		writeErr(w, err)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// decodeBody reads a JSON request body into v with a clear error for
// malformed JSON and for bodies over the limit.
func (s *Server) decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large",
			message: fmt.Sprintf("request body over %d bytes (ctxd's limit)", tooBig.Limit), cause: ErrBadRequest}
	case err != nil:
		return badRequest("reading the request body: %v", err)
	case len(body) == 0:
		return badRequest("empty request body: expected a JSON object")
	}
	if err := checkUnhonoured(r.URL.Path, body); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("malformed JSON in the request body at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return badRequest("request field %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("malformed JSON in the request body: %v", err)
	}
	return nil
}

// errorWriter is how errors are written on path: Ollama's shape under
// /api/, Anthropic's under /v1/messages, OpenAI's elsewhere.
func errorWriter(path string) func(http.ResponseWriter, error) {
	switch {
	case strings.HasPrefix(path, "/api/"):
		return func(w http.ResponseWriter, err error) { writeError(w, true, err) }
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return writeAnthropicError
	}
	return func(w http.ResponseWriter, err error) { writeError(w, false, err) }
}

// writeError answers err in the shape of the API: OpenAI
// {"error":{"message","type","code"}}, Ollama {"error":"..."}.
func writeError(w http.ResponseWriter, ollama bool, err error) {
	ae := toAPIError(err)
	w.Header().Set("Content-Type", "application/json")
	status := ae.status
	if status == 499 {
		status = http.StatusServiceUnavailable // the client is gone; this is only for logs
	}
	w.WriteHeader(status)
	if ollama {
		json.NewEncoder(w).Encode(map[string]string{"error": ae.message})
		return
	}
	var code any
	if ae.code != "" {
		code = ae.code
	}
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": ae.message, "type": ae.typ, "code": code, "param": nil}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// ErrShuttingDown ends the streams in flight when ctxd stops.
var ErrShuttingDown = errors.New("ctxd is shutting down")

// streamCut says whether a stream that failed after its first bytes ends
// with an error event (and, for OpenAI, [DONE]), and with which error: yes
// when the client is still there — the turn failed, or ctxd is shutting
// down (SIGTERM) — no when the client has gone.
func (s *Server) streamCut(ctx context.Context, err error) (error, bool) {
	switch {
	case ctx.Err() == nil:
		return err, true
	case s.stopping.Load():
		return &apiError{status: http.StatusServiceUnavailable, typ: "server_error", code: "shutting_down",
			message: "ctxd is shutting down; the response was cut short: retry when it is back", cause: ErrShuttingDown}, true
	}
	return err, false
}
