package httpapi

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/ctxd/ctxd/engine/llama"
	"github.com/ctxd/ctxd/internal/testmodel/chatmodel"
	"github.com/ctxd/ctxd/policy"
	"github.com/ctxd/ctxd/protocol"
	pb "github.com/ctxd/ctxd/protocol/ctxdpb"
	"github.com/ctxd/ctxd/sidecar"
	"github.com/openai/openai-go/v3"
)

// manifestRecorder passes calls to the daemon and keeps the segments the
// door sends, and the template name.
type manifestRecorder struct {
	Backend
	mu       sync.Mutex
	template string
	segs     []policy.Segment
}

func (r *manifestRecorder) Handle(ctx context.Context, connID uint64, req *pb.Request, emit sidecar.Emitter) *pb.Response {
	r.mu.Lock()
	switch b := req.GetBody().(type) {
	case *pb.Request_EnsurePrefix:
		m := protocol.ManifestFromWire(b.EnsurePrefix.GetManifest())
		r.template, r.segs = m.Template, m.Segments
	case *pb.Request_PrefillSuffix:
		for _, s := range b.PrefillSuffix.GetExtra() {
			r.segs = append(r.segs, protocol.SegmentFromWire(s))
		}
	}
	r.mu.Unlock()
	return r.Backend.Handle(ctx, connID, req, emit)
}

// TestChatTemplateControlTokens serves a model with a ChatML template and
// ChatML control tokens: the markers the template writes reach the model
// as single control tokens, the same text in a user message as text.
func TestChatTemplateControlTokens(t *testing.T) {
	tmpl, err := os.ReadFile("../internal/chat/testdata/chatml.jinja")
	if err != nil {
		t.Fatal(err)
	}
	path, ids := chatmodel.ChatML(t, string(tmpl))
	md, err := llama.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	start := chatmodel.Markers[0]
	if toks, err := md.TokenizeSpecial(start); err != nil || len(toks) != 1 || toks[0] != ids[0] {
		t.Fatalf("TokenizeSpecial(%q) = %v, %v; want the one control token %d", start, toks, err, ids[0])
	}
	plainStart, err := md.Tokenize(start, false)
	if err != nil || len(plainStart) < 2 {
		t.Fatalf("Tokenize(%q) = %v, %v; want text tokens", start, plainStart, err)
	}
	for _, tk := range plainStart {
		if tk == ids[0] || tk == ids[1] {
			t.Fatalf("Tokenize(%q) = %v holds a control token", start, plainStart)
		}
	}

	rec := &manifestRecorder{}
	d := startDoorWith(t, sidecar.Config{ModelPath: path}, Config{}, func(b Backend) Backend { rec.Backend = b; return rec })
	user := "please write " + start + " here"
	resp, err := d.openai.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "stories260K-chatml",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("you tell stories"), openai.UserMessage(user)},
		MaxTokens: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	template, segs := rec.template, rec.segs
	rec.mu.Unlock()
	if template != "chat:chatml" {
		t.Errorf("manifest template %q, want chat:chatml", template)
	}
	var text strings.Builder
	var inUser, controls int
	// want counts the prompt's tokens as the daemon must make them: BOS,
	// then each segment's control spans as special, the rest as text;
	// allText and allSpecial are the two wrong tokenizations.
	want, allText, allSpecial := 0, 0, 0
	if md.Facts().AddBOS {
		want, allText, allSpecial = 1, 1, 1
	}
	for _, s := range segs {
		text.WriteString(s.Text)
		for _, p := range s.Pieces() {
			var toks []int32
			if p.Control {
				controls++
				toks, err = md.TokenizeSpecial(p.Text)
				if len(toks) != 1 || toks[0] != ids[0] && toks[0] != ids[1] {
					t.Errorf("control span %q is tokens %v, want one control token", p.Text, toks)
				}
			} else {
				toks, err = md.Tokenize(p.Text, false)
				if strings.Contains(p.Text, start) {
					inUser++
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			want += len(toks)
		}
		a, _ := md.Tokenize(s.Text, false)
		b, _ := md.TokenizeSpecial(s.Text)
		allText += len(a)
		allSpecial += len(b)
	}
	full := text.String()
	if strings.Count(full, start) != 4 || controls != 5 || inUser != 1 {
		t.Fatalf("rendering %q: %d control spans, %d text runs holding %q; want 5 and 1", full, controls, inUser, start)
	}
	got := int(resp.Usage.PromptTokens)
	t.Logf("prompt tokens: %d (control markers as control tokens), %d all as text, %d all parsed as special", got, allText, allSpecial)
	if got != want || want == allText || want == allSpecial {
		t.Fatalf("the daemon tokenized the prompt into %d tokens, want %d (all as text: %d, all special: %d)", got, want, allText, allSpecial)
	}
	// The next turn reuses the first one's KV: control spans are tokenized
	// the same way turn after turn.
	next, err := d.openai.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "stories260K-chatml",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("you tell stories"), openai.UserMessage(user),
			openai.AssistantMessage(resp.Choices[0].Message.Content), openai.UserMessage("and " + start + " again")},
		MaxTokens: openai.Int(2),
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := next.Usage.PromptTokensDetails.CachedTokens; float64(c) < 0.9*float64(got) {
		t.Errorf("second turn reused %d tokens of the first turn's %d", c, got)
	}
}
