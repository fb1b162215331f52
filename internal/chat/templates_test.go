package chat

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ctxd/ctxd/policy"
)

// realTemplate is a chat template from a real model, in testdata (see
// testdata/README.md), with the token texts its GGUF carries.
type realTemplate struct {
	file     string
	bos, eos string
	family   string
	// lastUser marks templates that render the last user message apart
	// (Mistral: the tools and the system prompt go there) and refuse
	// conversations whose roles do not alternate.
	lastUser bool
}

var realTemplates = []realTemplate{
	{"chatml.jinja", "", "<|im_end|>", "chatml", false},
	{"qwen2.5.jinja", "", "<|im_end|>", "hermes", false},
	{"qwen3.jinja", "", "<|im_end|>", "hermes", false},
	{"qwen3-coder.jinja", "", "<|im_end|>", "qwen3-coder", false},
	{"llama3.1.jinja", "<|begin_of_text|>", "<|eot_id|>", "llama3", false},
	{"llama3.2.jinja", "<|begin_of_text|>", "<|eot_id|>", "llama3", false},
	{"mistral-nemo.jinja", "<s>", "</s>", "mistral", true},
	{"mistral-small-3.2.jinja", "<s>", "</s>", "mistral", true},
}

// testClock is the fixed clock the tests render with.
func testClock() time.Time { return time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC) }

// loadTemplate compiles a real template from testdata.
func loadTemplate(t *testing.T, rt realTemplate) *Template {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", rt.file))
	if err != nil {
		t.Fatal(err)
	}
	tm, err := NewTemplate(ModelInfo{ChatTemplate: string(src), BOS: rt.bos, EOS: rt.eos, Now: testClock})
	if err != nil {
		t.Fatalf("%s: %v", rt.file, err)
	}
	if tm.Name() != rt.family {
		t.Errorf("%s: Name() = %q, want %q", rt.file, tm.Name(), rt.family)
	}
	return tm
}

// Every real template renders a tool-using conversation, turn by turn,
// into manifests whose segments join to the rendering and whose stable
// segments the next turn keeps byte for byte.
func TestRealTemplates(t *testing.T) {
	for _, rt := range realTemplates {
		t.Run(rt.file, func(t *testing.T) {
			tm := loadTemplate(t, rt)
			checkConversation(t, tm, conversation, testTools)
			checkConversation(t, tm, conversation, nil)
			markers := strings.Join(tm.ControlMarkers(), " ")
			for _, stop := range tm.StopStrings() {
				if !strings.Contains(markers, stop) {
					t.Errorf("stop string %q not among the control markers %s", stop, markers)
				}
			}
			m := checkManifest(t, tm, conversation, testTools)
			if m.Boundary() == 0 {
				t.Errorf("nothing stable in a %d-message conversation", len(conversation))
			}
			t.Logf("%d segments, %d stable; stable %d of %d bytes", len(m.Segments), m.Boundary(), len(joined(m))-suffixBytes(m), len(joined(m)))
		})
	}
}

// suffixBytes is the text length of m's volatile segments.
func suffixBytes(m policy.Manifest) int {
	n := 0
	for _, s := range m.Suffix() {
		n += len(s.Text)
	}
	return n
}

// A template that writes the date: the next day's rendering of the same
// conversation is a fresh one, whatever the cut-point cache holds.
func TestRenderNextDay(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "llama3.2.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	day := testClock()
	info := ModelInfo{ChatTemplate: string(src), BOS: "<|begin_of_text|>", EOS: "<|eot_id|>", Now: func() time.Time { return day }}
	tm, err := NewTemplate(info)
	if err != nil {
		t.Fatal(err)
	}
	first := checkManifest(t, tm, conversation, testTools)
	day = day.Add(24 * time.Hour)
	next := checkManifest(t, tm, conversation, testTools)
	other, _ := NewTemplate(info)
	fresh, err := other.Render(conversation, testTools)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(next, fresh) {
		t.Fatal("the next day's manifest differs from a fresh template's")
	}
	if joined(first) == joined(next) || !strings.Contains(joined(next), "02 Dec 2026") {
		t.Fatalf("the date did not change: %.300q", joined(next))
	}
}
