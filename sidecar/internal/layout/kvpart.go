package layout

import (
	"github.com/ctxd/ctxd/engine"
	"github.com/ctxd/ctxd/policy"
)

// Parts of blocks. A hot set parks KV in whole blocks, yet a moved or
// copied run, a cut or a donor's exact prefix often wants only part of
// one: the block's KV comes back whole and is trimmed in the engine (the
// engine interface moves whole ranges only), or its wanted tokens are
// prefilled again; policy.PartialBlockWorthCopying weighs the two.

// kvPiece is KV to put at tape index dst of the new prompt: r, or only its
// tokens [lo, lo+n) when n > 0 (r is then a whole block).
type kvPiece struct {
	dst   int
	r     engine.Range
	lo, n int
}

// want is the part of r the piece puts in place.
func (pc kvPiece) want() (lo, n int) {
	if pc.n == 0 {
		return 0, pc.r.Count
	}
	return pc.lo, pc.n
}

// insertPart puts tokens [lo, lo+n) of r at positions [at, at+n): r is
// inserted whole at at, what is not wanted removed and the wanted part
// shifted down to at (no shift when lo is 0: KV inserted at the position
// it was computed at stays what it was). Positions [at, at+r.Count) must
// be free; on failure none of r stays in the engine.
func insertPart(e engine.Context, r engine.Range, lo, n, at int) error {
	if err := e.InsertRange(r, at); err != nil {
		return err
	}
	if lo == 0 && n == r.Count {
		return nil
	}
	undo := func(err error) error {
		_, _ = e.Remove(at, at+r.Count)
		return err
	}
	if lo+n < r.Count {
		if _, err := e.Remove(at+lo+n, at+r.Count); err != nil {
			return undo(err)
		}
	}
	if lo > 0 {
		if _, err := e.Remove(at, at+lo); err != nil {
			return undo(err)
		}
		if err := e.Shift(at+lo, at+lo+n, -lo); err != nil {
			return undo(err)
		}
	}
	return nil
}

// partWorthCopying reports whether n tokens of a block of blockTokens are
// better read back than prefilled, with the daemon's measured figures
// (policy.PartialBlockWorthCopying); a whole block always is.
func partWorthCopying(env *Env, n, blockTokens int) bool {
	if n == blockTokens {
		return true
	}
	var perTok, perCopy float64
	if env.Reuse != nil {
		set := env.Reuse()
		perTok, perCopy = set.Cost.TurnSeconds(1, env.Hot.Limit), set.CopySecondsPerToken
	}
	return policy.PartialBlockWorthCopying(n, blockTokens, perTok, perCopy)
}
