package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ctxd/ctxd/internal/chat"
	"github.com/ctxd/ctxd/policy"
)

// The one turn loop. Every API (OpenAI Chat Completions and Completions,
// Ollama chat and generate, Anthropic Messages, OpenAI Responses) decodes
// its request into a chatTurn and hands it here with a dialect, the small
// encoder of that API's stream events, final bodies and errors. The loop
// owns what they share: the session choice, the turn (prefill, decode),
// cancellation when the client goes away, keep-alives while a prompt is
// prefilled, tool-call parsing and the usage of the turn (turnOut).

// dialect writes one API's answers. A value serves one request, so it may
// keep the state of its stream (open content blocks, item ids).
type dialect interface {
	// writeError answers err before any byte of a response was written.
	writeError(w http.ResponseWriter, err error)
	// format is how streamed events are framed.
	format() streamFormat
	// opening is what a stream starts with (right after the headers).
	opening(o *turnOut) []wireEvent
	// keepAlive is sent while nothing else is (a prefill runs).
	keepAlive() wireEvent
	// reasoning is newly generated reasoning of a reasoning model (its
	// <think> text, chat.ReasoningSplitter), shown apart from the reply.
	reasoning(text string) []wireEvent
	// delta is newly generated text safe to show and completed tool calls.
	delta(text string, calls []chat.ToolCall) []wireEvent
	// closing ends a stream that succeeded; o is complete.
	closing(o *turnOut) []wireEvent
	// failure ends a stream that failed after its headers went out; nil
	// when the client is gone.
	failure(err error) []wireEvent
	// body is the whole answer of a request that did not stream.
	body(o *turnOut) any
}

// streamFormat is how a dialect frames its stream.
type streamFormat struct {
	sse      bool // SSE; false: NDJSON
	numbered bool // a "sequence_number" in every event
}

// turnOut is what a turn produced, as the dialects report it. The prompt
// part of res is set once the prefill is done (prefilled), so an opening
// written after it can carry the prompt's usage; the rest at the end.
type turnOut struct {
	model   *modelInfo
	session uint64
	how     string // how the session was chosen
	start   time.Time

	mu        sync.Mutex
	prefilled bool
	res       turnResult
	text      string          // all text shown (non-streaming: the whole reply)
	reasoning string          // all reasoning shown
	calls     []chat.ToolCall // all tool calls
}

// result returns the turn's result so far and whether the prompt part of
// it is known.
func (o *turnOut) result() (turnResult, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.res, o.prefilled
}

// serveTurn runs a prepared turn and answers it in d's shape.
func (s *Server) serveTurn(w http.ResponseWriter, r *http.Request, t *chatTurn, d dialect, stream bool) {
	ctx := r.Context()
	if err := capMaxTokens(r.Header, &t.params); err != nil {
		d.writeError(w, err)
		return
	}
	var parser chat.ToolParser = passText{}
	split := &chat.ReasoningSplitter{} // raw completions: all text is reply
	if t.chat {
		parser = t.model.tmpl.NewToolParser(t.tools)
		split = t.model.tmpl.NewReasoningSplitter(promptEnd(t.manifest))
	}
	ls, how, err := s.table.acquire(ctx, t.key, t.family, t.manifest)
	if err != nil {
		d.writeError(w, err)
		return
	}
	held := true
	defer func() {
		if held {
			s.table.release(ls, nil)
		}
	}()
	w.Header().Set("X-Ctxd-Session", strconv.FormatUint(ls.id, 10))
	o := &turnOut{model: t.model, session: ls.id, how: how, start: time.Now()}
	prefilled := func(r turnResult) {
		o.mu.Lock()
		o.res, o.prefilled = r, true
		o.mu.Unlock()
	}
	finish := func(res turnResult) {
		held = false
		s.table.release(ls, segmentTexts(t.manifest))
		s.logTurn(ls, how, res)
		o.mu.Lock()
		o.res, o.prefilled = res, true
		o.mu.Unlock()
	}

	if !stream {
		res, err := s.runTurn(ctx, ls, t.model, t.manifest, t.params, turnHooks{prefilled: prefilled})
		if err != nil {
			d.writeError(w, err)
			return
		}
		finish(res)
		r1, reply := split.Feed(res.text)
		r2, rest := split.Flush()
		a, c := parser.Feed(reply + rest)
		b, e := parser.Flush()
		o.reasoning, o.text, o.calls = r1+r2, a+b, append(c, e...)
		if res.clamped {
			w.Header().Set(clampHeader, clampValue(res))
		}
		writeJSON(w, d.body(o))
		return
	}

	f := d.format()
	sw := newStreamWriter(w, f.sse, s.cfg.KeepAlive, d.keepAlive)
	sw.numbered = f.numbered
	sw.opening = func() []wireEvent { return d.opening(o) }
	sw.header = func(h http.Header) { h.Set("Trailer", clampHeader) }
	defer sw.close()
	show := func(text string, calls []chat.ToolCall) error {
		if text == "" && len(calls) == 0 {
			return nil
		}
		o.mu.Lock()
		o.text += text
		o.calls = append(o.calls, calls...)
		o.mu.Unlock()
		return sw.send(d.delta(text, calls)...)
	}
	// showPiece splits a generated piece into reasoning and reply; the
	// reply goes through the tool-call parser.
	showPiece := func(reasoning, reply string) error {
		if reasoning != "" {
			o.mu.Lock()
			o.reasoning += reasoning
			o.mu.Unlock()
			if err := sw.send(d.reasoning(reasoning)...); err != nil {
				return err
			}
		}
		return show(parser.Feed(reply))
	}
	hooks := turnHooks{
		prefilled: prefilled,
		progress:  func() { sw.begin() },
		text:      func(piece string) error { return showPiece(split.Feed(piece)) },
	}
	res, err := s.runTurn(ctx, ls, t.model, t.manifest, t.params, hooks)
	if err != nil {
		if !sw.isCommitted() {
			sw.close()
			d.writeError(w, err)
			return
		}
		held = false
		s.table.release(ls, nil)
		if err, ok := s.streamCut(ctx, err); ok {
			if evs := d.failure(err); len(evs) > 0 {
				sw.send(evs...)
			}
		}
		return
	}
	finish(res)
	sw.close() // no keep-alive after the last events
	if err := sw.begin(); err != nil {
		return
	}
	if err := showPiece(split.Flush()); err != nil {
		return
	}
	if err := show(parser.Flush()); err != nil {
		return
	}
	if err := sw.send(d.closing(o)...); err != nil {
		return
	}
	if res.clamped {
		w.Header().Set(clampHeader, clampValue(res))
	}
}

// maxTokensHeader caps the reply of a request that carries it, whatever
// its body asks: agents with no setting of their own for the reply's
// length (Codex) can cap it with a header from their provider settings.
const maxTokensHeader = "X-Ctxd-Max-Tokens"

func capMaxTokens(h http.Header, p *decodeParams) error {
	v := h.Get(maxTokensHeader)
	if v == "" {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return badRequest("header %s: %q is not a positive number of tokens", maxTokensHeader, v)
	}
	if p.maxTokens <= 0 || n < p.maxTokens {
		p.maxTokens = n
	}
	return nil
}

// promptEnd is the text the rendered prompt ends with (its last segment:
// the generation prompt), where a template may open a think block.
func promptEnd(m policy.Manifest) string {
	if len(m.Segments) == 0 {
		return ""
	}
	return m.Segments[len(m.Segments)-1].Text
}

// passText is the parser of raw completions: all text is text.
type passText struct{}

func (passText) Feed(piece string) (string, []chat.ToolCall) { return piece, nil }
func (passText) Flush() (string, []chat.ToolCall)            { return "", nil }

func (s *Server) logTurn(ls *liveSession, how string, r turnResult) {
	s.log.Debug("HTTP turn", "session", ls.id, "key", ls.key, "chosen_by", how, "prompt_tokens", r.promptTokens,
		"cached_tokens", r.cachedTokens, "approximate_tokens", r.approxTokens, "recomputed_tokens", r.recomputed, "prefilled", r.prefilledTokens, "prompt_ms", ms(r.promptDur),
		"decoded", r.decodedTokens, "decode_ms", ms(r.decodeDur), "reason", r.reason.String())
}
