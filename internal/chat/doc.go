// Package chat turns chat conversations (the messages and tool definitions
// of the OpenAI and Ollama APIs) into ctxd manifests, rendered with the
// model's own chat template, and parses the model's output back into text
// and tool calls.
//
// Rendering uses the model's tokenizer.chat_template (Jinja, evaluated by
// third_party/jinja, a fork of github.com/ardanlabs/jinja that runs every
// render in a box: steps, call depth, value and output sizes and time are
// bounded, a renderer panic is an error); a model without one gets the fallback, a
// ChatML-like layout of plain text markers (see fallback.go). The rendering
// is cut at message boundaries into segments: the system prompt
// (policy.KindSystem) and the tool definitions (policy.KindTools), both
// task_pinned and stable; earlier history (policy.KindUserTurn, and
// policy.KindTerminal for tool results), stable; the newest messages after
// the last assistant message and the generation prompt, volatile. The model
// output is read back by a streaming ToolParser of the template family's
// tool-call syntax.
//
// Files: message.go (the API's messages and tools), template.go
// (NewTemplate, names, stop strings, control markers), family.go (family
// detection), jinja.go (template variables), fallback.go (the fallback
// layout), render.go (cut points and stability), cutcache.go (what the
// last turns' renderings gave, so a turn re-renders only its new
// messages), fastcut.go (a long conversation's cut points from one marked
// rendering, in time linear in its length), control.go (which markers are control tokens), strftime.go,
// limits.go (the
// limits a conversation is checked against before rendering, and the
// template's box), sample.go (the sample conversations every template
// renders once when loaded, so a broken one is refused at start),
// toolparse.go (the streaming parser), toolcall_json.go (Hermes, Llama 3,
// Mistral calls), toolcall_xml.go (Qwen3-Coder calls).
//
// Invariants, which every file in this package keeps:
//
//   - A model's template never crashes or exhausts the process: it runs
//     within limits (third_party/jinja), and a conversation over MaxMessages,
//     MaxTools or MaxTextBytes is refused before it renders (ErrLimit). A
//     rendering ends with ErrCancelled soon after its context ends, and
//     such an ending is never cached.
//
//   - The concatenation of a manifest's segment texts is exactly the
//     template's rendering of the conversation (less a leading BOS token
//     text, which ctxd adds as a token of its own).
//
//   - A segment is stable only if appending a reply and a new message to the
//     conversation renders it again byte for byte at the same offset, so
//     turn after turn the stable segments of one request are the prefix of
//     the next and KV reuse is exact. Templates that rewrite earlier
//     messages (e.g. dropping old reasoning) make those messages volatile.
//
//   - A segment's Control spans cover only control markers the template
//     itself wrote, never a marker text from message content or tool
//     definitions (those stay text, so content cannot forge a control
//     token); a rendering that cannot tell them apart has no spans.
//
//   - Tool-call parsing never drops model output: text that does not parse
//     as a call of the template's family comes back as text.
//
//   - Pure: no cgo, no I/O, no goroutines; the clock is read only through
//     ModelInfo.Now when a template asks for the date.
package chat
