// Package replay drives a ctxd session through the model calls of a
// recorded agent trajectory and measures reuse, latency and warm/cold
// equality. ctxctl replay and the benchmarks use it.
package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ctxd/ctxd/client"
	"github.com/ctxd/ctxd/internal/clientconv"
	"github.com/ctxd/ctxd/internal/trace"
)

// Options control a replay.
type Options struct {
	DecodeTokens int  // greedy tokens per turn (default 4)
	VerifyCold   bool // also run each turn cold in a fresh session
	// SaveSnapshot, when set, saves the replayed session under this name
	// and then generates FinalTokens greedy tokens (default 16) from it.
	SaveSnapshot string
	FinalTokens  int
	// OnTurn, when set, sees each turn as it completes.
	OnTurn func(Turn)
}

// Turn is the measurement of one model call.
type Turn struct {
	Turn            int     `json:"turn"`
	PromptTokens    int     `json:"prompt_tokens"`
	ReusableTokens  int     `json:"reusable_tokens"`
	ReusedTokens    int     `json:"reused_tokens"`
	PrefilledTokens int     `json:"prefilled_tokens"`
	LatencyMS       float64 `json:"latency_ms"`
	Tokens          []int32 `json:"tokens"`
	Text            string  `json:"text"`

	ColdMatch     *bool    `json:"cold_match,omitempty"`
	MaxLogitDiff  *float64 `json:"max_logit_diff,omitempty"`
	ColdLatencyMS *float64 `json:"cold_latency_ms,omitempty"`
	ColdTokens    []int32  `json:"cold_tokens,omitempty"`
}

// Overflow records the first turn whose prompt did not fit.
type Overflow struct {
	Turn          int   `json:"turn"`
	PromptTokens  int64 `json:"prompt_tokens"`
	ContextTokens int64 `json:"context_tokens"`
}

// Summary aggregates turns 2..n (turn 1 has nothing to reuse).
type Summary struct {
	Turns          int       `json:"turns"`
	OverflowAtTurn int       `json:"overflow_at_turn,omitempty"`
	Overflow       *Overflow `json:"overflow,omitempty"`
	ReuseRatio     float64   `json:"reuse_ratio"`
	PromptReuse    float64   `json:"prompt_reuse"`
	WarmLatencyMS  float64   `json:"warm_latency_ms"`
	// With VerifyCold:
	ColdLatencyMS *float64 `json:"cold_latency_ms,omitempty"`
	WarmColdRatio *float64 `json:"warm_cold_ratio,omitempty"`
	ColdMatchAll  *bool    `json:"cold_match_all,omitempty"`
	MaxLogitDiff  *float64 `json:"max_logit_diff,omitempty"`
	// WarmColdBound is 3 × (1 − prompt_reuse), the target for WarmColdRatio.
	WarmColdBound *float64 `json:"warm_cold_bound,omitempty"`
	// With SaveSnapshot: the snapshot and the greedy continuation after it
	// (what "ctxctl snapshot restore NAME --generate N" must reproduce).
	Snapshot    string  `json:"snapshot,omitempty"`
	FinalTokens []int32 `json:"final_tokens,omitempty"`
}

// Report is a whole replay.
type Report struct {
	Trace         string  `json:"trace"`
	ContextTokens int     `json:"context_tokens"`
	DecodeTokens  int     `json:"decode_tokens"`
	Turns         []Turn  `json:"turns"`
	Summary       Summary `json:"summary"`
}

// Run replays tr on a new session of c.
func Run(ctx context.Context, c *client.Client, tr *trace.Trajectory, o Options) (*Report, error) {
	if o.DecodeTokens <= 0 {
		o.DecodeTokens = 4
	}
	warm, err := c.OpenSession(ctx, "replay "+tr.Path)
	if err != nil {
		return nil, err
	}
	defer warm.Close(context.WithoutCancel(ctx))
	rep := &Report{Trace: tr.Path, ContextTokens: warm.ContextTokens(), DecodeTokens: o.DecodeTokens}
	for _, turn := range tr.Turns() {
		res, logits, err := runTurn(ctx, warm, turn, o)
		var re *client.RemoteError
		if errors.Is(err, client.ErrContextOverflow) && errors.As(err, &re) && re.Overflow != nil {
			rep.Summary.OverflowAtTurn = turn.Index
			rep.Summary.Overflow = &Overflow{Turn: turn.Index, PromptTokens: re.Overflow.PromptTokens, ContextTokens: re.Overflow.ContextTokens}
			break
		}
		if err != nil {
			return rep, fmt.Errorf("turn %d: %w", turn.Index, err)
		}
		if o.VerifyCold {
			if err := verifyCold(ctx, c, turn, o, &res, logits); err != nil {
				return rep, fmt.Errorf("turn %d (cold): %w", turn.Index, err)
			}
		}
		rep.Turns = append(rep.Turns, res)
		if o.OnTurn != nil {
			o.OnTurn(res)
		}
	}
	rep.Summary.fill(rep.Turns, o.VerifyCold)
	if o.SaveSnapshot != "" {
		if len(rep.Turns) == 0 {
			return rep, fmt.Errorf("nothing to save as %s: no turn of the trace fit the context (overflow at turn %d)", o.SaveSnapshot, rep.Summary.OverflowAtTurn)
		}
		if _, err := warm.Snapshot(ctx, o.SaveSnapshot); err != nil {
			return rep, fmt.Errorf("saving snapshot %s: %w", o.SaveSnapshot, err)
		}
		n := o.FinalTokens
		if n <= 0 {
			n = 16
		}
		var final []int32
		if _, err := warm.Decode(ctx, client.DecodeOptions{MaxTokens: n}, func(t client.Token) error {
			final = append(final, t.ID)
			return nil
		}); err != nil {
			return rep, fmt.Errorf("continuation after snapshot %s: %w", o.SaveSnapshot, err)
		}
		rep.Summary.Snapshot, rep.Summary.FinalTokens = o.SaveSnapshot, final
	}
	return rep, nil
}

func runTurn(ctx context.Context, s *client.Session, turn trace.Turn, o Options) (Turn, [][]float32, error) {
	t := Turn{Turn: turn.Index}
	start := time.Now()
	pre, err := s.EnsurePrefix(ctx, clientconv.Manifest(turn.Manifest))
	if err != nil {
		return t, nil, err
	}
	suf, err := s.PrefillSuffix(ctx)
	if err != nil {
		return t, nil, err
	}
	var logits [][]float32
	res, err := s.Decode(ctx, client.DecodeOptions{MaxTokens: o.DecodeTokens, ReturnLogits: o.VerifyCold}, func(tok client.Token) error {
		t.Tokens = append(t.Tokens, tok.ID)
		if tok.Logits != nil {
			logits = append(logits, tok.Logits)
		}
		return nil
	})
	if err != nil {
		return t, nil, err
	}
	t.LatencyMS = ms(time.Since(start))
	t.Text = res.Text
	t.PromptTokens = suf.PromptTokens
	t.ReusableTokens = pre.ReusableTokens + suf.ReusableTokens
	t.ReusedTokens = pre.ReusedTokens + suf.ReusedTokens
	t.PrefilledTokens = pre.PrefilledTokens + suf.PrefilledTokens
	return t, logits, nil
}

func verifyCold(ctx context.Context, c *client.Client, turn trace.Turn, o Options, warm *Turn, warmLogits [][]float32) error {
	// A cold session: no resume from the warm session's snapshots.
	s, _, err := c.OpenSessionOptions(ctx, client.SessionOptions{Name: "replay cold", Cold: true})
	if err != nil {
		return err
	}
	defer s.Close(context.WithoutCancel(ctx))
	cold, coldLogits, err := runTurn(ctx, s, turn, o)
	if err != nil {
		return err
	}
	match := slices.Equal(warm.Tokens, cold.Tokens)
	diff := 0.0
	for i := 0; i < min(len(warmLogits), len(coldLogits)); i++ {
		if i > 0 && warm.Tokens[i-1] != cold.Tokens[i-1] {
			break // later steps condition on different tokens
		}
		diff = max(diff, maxAbsDiff(warmLogits[i], coldLogits[i]))
	}
	lat := cold.LatencyMS
	warm.ColdMatch, warm.MaxLogitDiff, warm.ColdLatencyMS = &match, &diff, &lat
	if !match {
		warm.ColdTokens = cold.Tokens
	}
	return nil
}

func (s *Summary) fill(turns []Turn, cold bool) {
	s.Turns = len(turns)
	var reused, reusable, prompt int
	var warmMS, coldMS, maxDiff float64
	all := true
	for i, t := range turns {
		if t.ColdMatch != nil {
			all = all && *t.ColdMatch
			maxDiff = max(maxDiff, *t.MaxLogitDiff)
		}
		if i == 0 {
			continue
		}
		reused += t.ReusedTokens
		reusable += t.ReusableTokens
		prompt += t.PromptTokens
		warmMS += t.LatencyMS
		if t.ColdLatencyMS != nil {
			coldMS += *t.ColdLatencyMS
		}
	}
	s.ReuseRatio = ratio(reused, reusable)
	s.PromptReuse = ratio(reused, prompt)
	s.WarmLatencyMS = warmMS
	if cold {
		r := 0.0
		if coldMS > 0 {
			r = warmMS / coldMS
		}
		bound := 3 * (1 - s.PromptReuse)
		s.ColdLatencyMS, s.WarmColdRatio, s.ColdMatchAll, s.MaxLogitDiff, s.WarmColdBound = &coldMS, &r, &all, &maxDiff, &bound
	}
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range min(len(a), len(b)) {
		x := float64(a[i] - b[i])
		d = max(d, x, -x)
	}
	return d
}
