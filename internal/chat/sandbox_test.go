package chat

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// hostileTemplates are chat templates a bad download could carry. Each
// must be refused when loaded, with the reason, within a few seconds and
// without taking the process down or its memory up by gigabytes. Before
// the box, the recursive macro ended the process with "fatal error: stack
// overflow", the loops pinned a core and 6 GB, string doubling took
// 1.5 GB a request.
var hostileTemplates = map[string]string{
	"recursive macro":  `{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(1) }}`,
	"recursive caller": `{% macro g() %}{{ caller() }}{% endmacro %}{% macro f() %}{% call g() %}{{ f() }}{% endcall %}{% endmacro %}{{ f() }}`,
	"nested loops":     `{% for i in range(1000000) %}{% for j in range(1000000) %}x{% endfor %}{% endfor %}`,
	"endless set":      `{% set ns = namespace(n=0) %}{% for i in range(1000000) %}{% for j in range(1000000) %}{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}`,
	"string doubling":  `{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`,
	"replace doubling": `{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s | replace('a', 'aa') | replace('b', 'bb') %}{% endfor %}{{ ns.s }}`,
	"string repeat":    `{{ 'x' * 100000000000 }}`,
	"negative repeat":  `{{ 'x' * -1 }}{{ messages[0].content }}`,
	"huge range":       `{% for i in range(1000000000000) %}{% endfor %}`,
	"list doubling":    `{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}`,
	"output flood":     `{% for i in range(1000000) %}{{ messages | tojson }}{% endfor %}`,
}

func TestHostileTemplatesRefusedAtLoad(t *testing.T) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for name, src := range hostileTemplates {
		t.Run(name, func(t *testing.T) {
			t0 := time.Now()
			_, err := NewTemplate(ModelInfo{ChatTemplate: src})
			took := time.Since(t0)
			if name == "negative repeat" {
				// Jinja gives "" for 'x' * -1; the port panicked in
				// strings.Repeat: either answer is fine, a crash is not.
				if err != nil && !errors.Is(err, ErrTemplate) {
					t.Errorf("error not wrapping ErrTemplate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrTemplate) || !errors.Is(err, ErrLimit) {
				t.Fatalf("loaded, or refused without naming a limit: %v", err)
			}
			if took > 2*SampleTimeout {
				t.Errorf("refusing it took %v", took)
			}
			t.Logf("refused in %v: %v", took.Round(time.Millisecond), err)
		})
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 2<<30 {
		t.Errorf("the heap grew by %d MiB", grew>>20)
	}
}

// TestRenderLimitsCheckedFirst: a conversation over MaxMessages is
// refused at once, naming the limit, before the template runs.
func TestRenderLimitsCheckedFirst(t *testing.T) {
	tm, err := NewTemplate(ModelInfo{ChatTemplate: readTemplate(t, "chatml.jinja")})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, 50_000)
	for i := range msgs {
		msgs[i] = Message{Role: []string{RoleUser, RoleAssistant}[i%2], Content: "hi"}
	}
	t0 := time.Now()
	_, err = tm.Render(msgs, nil)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "MaxMessages") {
		t.Fatalf("50,000 messages: %v", err)
	}
	if d := time.Since(t0); d > 50*time.Millisecond {
		t.Errorf("refusing took %v: the limit was not checked first", d)
	}
}

// TestRenderCancelled: a rendering stops soon after its context ends (a
// client that has gone away), with ErrCancelled.
func TestRenderCancelled(t *testing.T) {
	tm, err := NewTemplate(ModelInfo{ChatTemplate: readTemplate(t, "qwen3.jinja")})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]Message, MaxMessages)
	for i := range msgs {
		msgs[i] = Message{Role: []string{RoleUser, RoleAssistant}[i%2], Content: strings.Repeat("word ", 50)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	t0 := time.Now()
	_, err = tm.RenderContext(ctx, msgs, nil)
	if !errors.Is(err, ErrCancelled) {
		t.Fatalf("cancelled rendering: %v", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("rendering went on %v after the cancel", d-200*time.Millisecond)
	}
}

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
