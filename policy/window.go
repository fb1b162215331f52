package policy

import (
	"errors"
	"fmt"
)

// MaxPlausibleWindow is the longest trained window ctxd believes a model
// file claims: a million tokens, the longest of today's open models. A
// claim beyond it (a GGUF saying 2^31−1) is taken as a typo or an attack,
// not a reason to size the daemon to all of memory.
const MaxPlausibleWindow = 1 << 20

// ErrImplausibleWindow reports a trained window that is no window at all
// (zero, or negative: a 2^32−1 in the file reads as −1).
var ErrImplausibleWindow = errors.New("implausible trained context")

// PlausibleWindow is the trained window the daemon plans with, given the
// model file's claim: the claim itself when it is in (0,
// MaxPlausibleWindow]; MaxPlausibleWindow, with capped set so the daemon
// warns, when it is larger; an error wrapping ErrImplausibleWindow when it
// is not positive. Memory then bounds the hot budget and the context as
// for any model (AutoHotBudget, PlanCapacity).
func PlausibleWindow(claimed int64) (window int, capped bool, err error) {
	switch {
	case claimed <= 0:
		return 0, false, fmt.Errorf("%w: the model file's context_length reads %d", ErrImplausibleWindow, claimed)
	case claimed > MaxPlausibleWindow:
		return MaxPlausibleWindow, true, nil
	}
	return int(claimed), false, nil
}
