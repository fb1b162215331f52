package jinja

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLimits: each limit stops the render it bounds with ErrLimit, and a
// renderer panic is an ErrPanic error.
func TestLimits(t *testing.T) {
	small := Limits{MaxSteps: 10_000, MaxDepth: 8, MaxBytes: 1 << 10, MaxItems: 100}
	for src, want := range map[string]error{
		`{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(1) }}`:                       ErrLimit,
		`{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}`: ErrLimit,
		`{{ 'x' * 2000 }}`: ErrLimit,
		`{% set ns = namespace(s='x') %}{% for i in range(20) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`:                                 ErrLimit,
		`{{ [1,2,3,4,5,6,7,8,9,10] * 1 }}{% set ns = namespace(l=[1]) %}{% for i in range(10) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`: ErrLimit,
		`{% for i in range(99999999999) %}{% endfor %}`:                                                                                   ErrLimit,
		`{{ 'x' * -1 }}`: nil, // Jinja: ""; either "" or ErrPanic, never a crash
		`{% macro f(n) %}{% if n < 5 %}{{ f(n+1) }}{% endif %}{{ n }}{% endmacro %}{{ f(1) }}`: nil,
	} {
		tm, err := Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		_, err = tm.RenderContext(context.Background(), nil, small)
		if want == nil {
			if err != nil && !errors.Is(err, ErrPanic) {
				t.Errorf("%s: %v", src, err)
			}
			continue
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", src, err, want)
		}
	}
}

// TestRenderContextCancelled: a render ends soon after its context.
func TestRenderContextCancelled(t *testing.T) {
	tm, err := Compile(`{% for i in range(1000000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = tm.RenderContext(ctx, nil, Limits{MaxSteps: 1 << 40})
	if !errors.Is(err, ErrLimit) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled render: %v", err)
	}
	if d := time.Since(t0); d > 3*time.Second { // generous: the machine may be loaded
		t.Errorf("took %v", d)
	}
}
