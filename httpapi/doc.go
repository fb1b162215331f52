// Package httpapi is ctxd's HTTP front door: OpenAI-compatible
// (/v1/chat/completions, /v1/completions, /v1/models) and Ollama-compatible
// (/api/chat, /api/generate, /api/tags, /api/show, /api/version, /api/ps)
// endpoints, so coding agents that speak those APIs use ctxd unmodified.
//
// It is an adapter and nothing more: a request is rendered into a manifest
// by package internal/chat, mapped to a ctxd session (sessions.go), and
// driven through the same calls a Unix-socket client makes, handed to the
// daemon in-process (Backend.Handle with a connection id of the adapter's
// own). The daemon learns nothing about HTTP.
//
// Files: server.go (routes, limits), peer.go (who may connect), sessions.go
// (request → session), turn.go (one EnsurePrefix/PrefillSuffix/Decode
// turn), openai.go and ollama.go (the two wire formats), stream.go (SSE and
// NDJSON writers with keep-alive chunks), stop.go (stop strings held back
// from the stream), model.go (what the endpoints say about the model).
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
//   - Requests whose first (system) segment differs get sessions of their
//     own, so a side request never takes the KV of the main conversation;
//     the number of live sessions is capped, least recently used closed
//     first (the daemon snapshots them on close, so they resume).
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
