package chat

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ModelInfo is what NewTemplate needs from the model (read by the caller
// from the GGUF metadata).
type ModelInfo struct {
	ChatTemplate string // tokenizer.chat_template, "" when the model has none
	BOS, EOS     string // token texts, may be ""
	Architecture string // general.architecture, for family detection hints
	// Now is the clock templates read through strftime_now (e.g. Llama's
	// "Today Date"); nil means time.Now.
	Now func() time.Time
}

// renderFunc renders a conversation to text, with the assistant generation
// prompt when gen is set.
type renderFunc func(ctx context.Context, msgs []Message, tools []Tool, gen bool) (string, error)

// Template renders conversations for one model. It is safe for concurrent
// use.
type Template struct {
	name   string
	family family
	stops  []string
	bos    string
	render renderFunc
	// markers are the control markers the template writes (see
	// templateMarkers); cuts never split one.
	markers []string
	// cuts remembers the renderings that found cut points (cutcache.go).
	cuts cutCache
	// thinks: the template writes <think>…</think> (a reasoning model);
	// its replies are split by NewReasoningSplitter.
	thinks bool
}

// NewTemplate parses the model's template; ChatTemplate == "" selects the
// documented fallback (see fallback.go). A template that does not parse
// returns an error wrapping ErrTemplate (the caller may fall back), and so
// does one that cannot render a sample conversation within its limits
// (sample.go): a template comes from a downloaded file and is run boxed.
func NewTemplate(info ModelInfo) (*Template, error) {
	if strings.TrimSpace(info.ChatTemplate) == "" {
		return newFallback(info), nil
	}
	r, err := newJinja(info)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	fam := detectFamily(info.ChatTemplate)
	t := &Template{
		name:    fam.name,
		family:  fam,
		stops:   stopStrings(info.ChatTemplate, info.EOS),
		bos:     info.BOS,
		render:  r,
		markers: templateMarkers(info),
		thinks:  strings.Contains(info.ChatTemplate, thinkOpen) && strings.Contains(info.ChatTemplate, thinkClose),
	}
	if err := t.checkSamples(); err != nil {
		return nil, err
	}
	return t, nil
}

// markerPattern matches the control markers of chat templates:
// <|im_start|>, [INST], [/INST], [TOOL_CALLS], <start_of_turn> and the like.
var markerPattern = regexp.MustCompile(`<\|[A-Za-z0-9_]+\|>|\[/?[A-Z][A-Z_]*\]|</?[a-z_]+>`)

// templateMarkers lists the control markers in the template text, plus the
// BOS and EOS texts.
func templateMarkers(info ModelInfo) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range append(markerPattern.FindAllString(info.ChatTemplate, -1), info.BOS, info.EOS) {
		if m != "" && !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// Name names the template family, e.g. "chatml", "hermes", "llama3",
// "qwen3-coder", "mistral", "jinja" (a template of no known family) or
// "fallback"; it goes into Manifest.Template.
func (t *Template) Name() string { return t.name }

// StopStrings returns the end-of-turn markers that end generation (e.g.
// "<|im_end|>"), the model's EOS text included.
func (t *Template) StopStrings() []string { return append([]string(nil), t.stops...) }

// ControlMarkers returns the control-marker texts the template writes
// (e.g. "<|im_start|>", "[INST]", "<tool_call>") and the BOS and EOS texts:
// the texts a tokenizer should map to the model's control tokens when they
// come from the template rather than from message content.
func (t *Template) ControlMarkers() []string { return append([]string(nil), t.markers...) }

// endMarkers are the end-of-turn texts of known templates; a template that
// writes one of them gets it as a stop string.
var endMarkers = []string{"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>"}

// stopStrings lists the end markers the template text writes, then eos.
func stopStrings(tmpl, eos string) []string {
	var out []string
	add := func(s string) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	for _, m := range endMarkers {
		if strings.Contains(tmpl, m) {
			add(m)
		}
	}
	if eos != "" {
		add(eos)
	}
	return out
}
