// Package httpapi is ctxd's HTTP front door: OpenAI-compatible
// (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models),
// Anthropic-compatible (/v1/messages, /v1/messages/count_tokens) and
// Ollama-compatible (/api/chat, /api/generate, /api/tags, /api/show,
// /api/version, /api/ps) endpoints, so coding agents that speak those APIs
// (Claude Code, Codex, Qwen Code, opencode, …) use ctxd unmodified.
//
// It is an adapter and nothing more: a request is rendered into a manifest
// by package internal/chat, mapped to a ctxd session (sessions.go), and
// driven through the same calls a Unix-socket client makes, handed to the
// daemon in-process (Backend.Handle with a connection id of the adapter's
// own; Backend.CountTokens and Backend.ModelFacts for what the wire
// protocol has no request for). The daemon learns nothing about HTTP, and
// the door never opens the model file.
//
// Every API's request becomes a chatTurn and runs through one turn loop
// (loop.go: session choice, prefill, decode, cancellation, keep-alives,
// tool-call parsing); a dialect per API writes its stream events, final
// bodies and errors.
//
// Files: server.go (routes, limits), peer.go (who may connect), sessions.go
// (request → session; the rule is policy.ChooseSession), loop.go (the turn
// loop and the dialect interface), turn.go (one EnsurePrefix/
// PrefillSuffix/Decode turn), usage.go (every API's usage from one turn
// result), openai.go, ollama.go, anthropic.go and responses.go (requests
// of each API) with openai_dialect.go, ollama_dialect.go,
// anthropic_dialect.go and responses_dialect.go (their answers), stream.go
// (SSE and NDJSON writers with keep-alive events), stop.go (stop strings
// held back from the stream), model.go (what the endpoints say about the
// model).
//
// Invariants:
//   - Without an API key only loopback peers are served, and on Linux only
//     peers whose socket belongs to ctxd's own uid (inet_diag); with a key
//     every request carries it as a Bearer token.
//   - Nothing is truncated silently: a prompt that does not fit a dense
//     context is refused with both numbers (context_length_exceeded);
//     max_tokens beyond what fits is clamped and the clamp reported (header
//     or trailer X-Ctxd-Max-Tokens-Clamped, and a log line).
//   - Usage is honest: cached tokens are the tokens whose KV was reused,
//     prompt_n / prompt_eval_count the tokens actually evaluated.
//   - Requests whose first message (the agent's own system prompt)
//     differs get sessions of their own, so a side request never takes the
//     KV of the main conversation; a request never waits behind a busy
//     session of another conversation; the number of live sessions is
//     capped, side sessions closed before main ones (the daemon snapshots
//     them on close, so they resume).
//   - What varies per process without meaning for the model never reaches
//     the prompt: Claude Code's billing header line, metadata, request and
//     item ids, cache_control markers.
//   - ctxd serves one model under any model name and reports the served
//     one; every endpoint reports the same context length (a session's).
//   - A streaming response sends its headers at once and a chunk at least
//     every KeepAlive while a prefill runs; a client that goes away cancels
//     its call, which stops decoding within a token and leaves the session
//     consistent.
//   - Manifests reach the daemon under the template name "chat:<name>"
//     (part of the compatibility key), with the control markers the chat
//     template wrote marked as control spans and marker texts from the
//     request's content left as text.
//   - Generated text never shows a stop string or a part of one, and
//     text that may begin a tool call is held back until the tool parser
//     decides.
package httpapi
