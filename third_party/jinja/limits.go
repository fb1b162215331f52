package jinja

// This file is ctxd's addition to the fork (see NOTICE): every render runs
// within limits, so a template from a downloaded model file cannot crash
// or exhaust the process. Steps (nodes and expressions evaluated, loop
// iterations) bound CPU time, the context bounds wall time (checked every
// 256 steps), the depth of macro and caller calls bounds the Go stack
// (a recursive macro otherwise ends in "fatal error: stack overflow",
// which no recover catches), and MaxBytes bounds any string value and the
// output, MaxItems any list and dict.

import (
	"context"
	"errors"
	"fmt"
	"math"
)

// Limits bound one render.
type Limits struct {
	MaxSteps int64 // evaluation steps
	MaxDepth int   // nested macro and caller calls
	MaxBytes int   // any string value, and the output
	MaxItems int   // any list or dict
}

// DefaultLimits fit every chat template we know rendering conversations
// of thousands of messages, with room to spare.
var DefaultLimits = Limits{MaxSteps: 50_000_000, MaxDepth: 64, MaxBytes: 64 << 20, MaxItems: 1 << 20}

// maxRange bounds range(): the list is built before any step is counted.
const maxRange = 1 << 20

var (
	// ErrLimit: the render broke one of its limits.
	ErrLimit = errors.New("template limit exceeded")
	// ErrPanic: the renderer panicked on this template.
	ErrPanic = errors.New("template renderer failed")
)

type budget struct {
	ctx   context.Context
	lim   Limits
	steps int64
	depth int
}

func newBudget(ctx context.Context, lim Limits) *budget {
	if lim.MaxSteps <= 0 {
		lim.MaxSteps = DefaultLimits.MaxSteps
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = DefaultLimits.MaxDepth
	}
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultLimits.MaxBytes
	}
	if lim.MaxItems <= 0 {
		lim.MaxItems = DefaultLimits.MaxItems
	}
	return &budget{ctx: ctx, lim: lim}
}

func (b *budget) step() error {
	b.steps++
	if b.steps > b.lim.MaxSteps {
		return fmt.Errorf("%w: more than %d evaluation steps", ErrLimit, b.lim.MaxSteps)
	}
	if b.steps&255 == 0 {
		if err := b.ctx.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrLimit, context.Cause(b.ctx))
		}
	}
	return nil
}

func (b *budget) enter(name string) error {
	if b.depth >= b.lim.MaxDepth {
		return fmt.Errorf("%w: calls nested more than %d deep (in %s)", ErrLimit, b.lim.MaxDepth, name)
	}
	b.depth++
	return nil
}

func (b *budget) leave() { b.depth-- }

func (b *budget) checkOutput(n int) error {
	if n > b.lim.MaxBytes {
		return fmt.Errorf("%w: output over %d bytes", ErrLimit, b.lim.MaxBytes)
	}
	return nil
}

func (b *budget) checkValue(v Value) error {
	switch {
	case v.IsString() && len(v.AsString()) > b.lim.MaxBytes:
		return fmt.Errorf("%w: a string of %d bytes (the most is %d)", ErrLimit, len(v.AsString()), b.lim.MaxBytes)
	case v.IsList() && v.AsList().Len() > b.lim.MaxItems:
		return fmt.Errorf("%w: a list of %d items (the most is %d)", ErrLimit, v.AsList().Len(), b.lim.MaxItems)
	case v.IsDict() && len(v.AsDict().Keys) > b.lim.MaxItems:
		return fmt.Errorf("%w: a dict of %d keys (the most is %d)", ErrLimit, len(v.AsDict().Keys), b.lim.MaxItems)
	}
	return nil
}

// checkRepeat refuses string * n before it allocates past MaxBytes.
func (b *budget) checkRepeat(a, n Value) error {
	if !a.IsString() || !n.IsInt() {
		return nil
	}
	if k := n.AsInt(); k > 0 && len(a.AsString()) > 0 && k > int64(b.lim.MaxBytes/len(a.AsString())) {
		return fmt.Errorf("%w: a string repeated %d times (over %d bytes)", ErrLimit, k, b.lim.MaxBytes)
	}
	if n.AsInt() < 0 {
		return nil // strings.Repeat would panic; Jinja gives ""
	}
	return nil
}

// rangeLen is the length of range(start, stop, step), saturating.
func rangeLen(start, stop, step int64) int64 {
	var span float64
	if step > 0 {
		span = (float64(stop) - float64(start)) / float64(step)
	} else {
		span = (float64(start) - float64(stop)) / float64(-step)
	}
	if span <= 0 {
		return 0
	}
	return int64(math.Min(math.Ceil(span), math.MaxInt64/2))
}
