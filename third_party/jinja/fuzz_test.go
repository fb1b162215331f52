package jinja

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLimits are small so that one execution stays short.
var fuzzLimits = Limits{MaxSteps: 100_000, MaxDepth: 32, MaxBytes: 64 << 10, MaxItems: 10_000}

// FuzzRender: any template source, rendered with any message text, ends
// within its limits with a result or an error; it never crashes, hangs or
// grows past MaxBytes (make fuzz; CI runs it for FUZZTIME).
func FuzzRender(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("..", "chat", "testdata", "*.jinja"))
	for _, p := range seeds {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b), "hello")
		}
	}
	for _, s := range []string{
		`{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(1) }}`,
		`{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}`,
		`{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}`,
		`{{ 'x' * 99999999999 }}`, `{{ messages[0]['content'][::-1] | upper }}`, `{{ (messages | tojson)[1:] }}`,
		`{% for m in messages %}{{ m.content | replace('a', 'aa') | indent(4) | trim }}{% endfor %}`,
	} {
		f.Add(s, "a message")
	}
	f.Fuzz(func(t *testing.T, src, content string) {
		tm, err := Compile(src)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		msg := NewDict()
		msg.AsDict().Set("role", NewString("user"))
		msg.AsDict().Set("content", NewString(content))
		out, err := tm.RenderContext(ctx, map[string]Value{
			"messages": NewList([]Value{msg}), "add_generation_prompt": NewBool(true),
			"bos_token": NewString("<s>"), "eos_token": NewString("</s>"),
		}, fuzzLimits)
		if err == nil && len(out) > fuzzLimits.MaxBytes {
			t.Fatalf("output of %d bytes past MaxBytes", len(out))
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			t.Fatal("deadline error without a deadline")
		}
	})
}
