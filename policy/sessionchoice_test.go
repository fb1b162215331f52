package policy

import "testing"

func TestChooseSession(t *testing.T) {
	const (
		preamble = "<|im_start|>system\nYou are a "
		agentA   = "You are a coding agent. Follow the repository's conventions."
		agentB   = "Generate a short title for this conversation."
	)
	seg := func(s ...string) []string { return s }
	tests := []struct {
		name  string
		req   SessionRequest
		cands []SessionCandidate
		want  SessionChoice
	}{
		{"nothing live", SessionRequest{Family: agentA, Segments: seg(preamble + agentA)}, nil, SessionChoice{-1, ChosenNew}},
		{"next turn of the keyless conversation",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "u1", "a1", "u2")},
			[]SessionCandidate{{Family: agentA, Segments: seg(preamble+agentA, "u1")}},
			SessionChoice{0, ChosenByPrefix}},
		{"key must match",
			SessionRequest{Key: "k2", Family: agentA, Segments: seg(preamble + agentA)},
			[]SessionCandidate{{Key: "k1", Family: agentA, Segments: seg(preamble + agentA)}},
			SessionChoice{-1, ChosenNew}},
		{"same key",
			SessionRequest{Key: "k1", Family: agentA, Segments: seg(preamble+agentA, "u1")},
			[]SessionCandidate{{Key: "k1", Family: agentA, Segments: seg(preamble + agentA)}},
			SessionChoice{0, ChosenByKey}},
		// issue 19 item 8: the template's preamble is shared by every
		// rendering; the agents' own texts differ at once.
		{"a side request's short system prompt is another family",
			SessionRequest{Family: agentB, Segments: seg(preamble + agentB[len("You are a "):])},
			[]SessionCandidate{{Family: agentA, Segments: seg(preamble + agentA[len("You are a "):])}},
			SessionChoice{-1, ChosenNew}},
		{"today's date rebuilt into the system prompt stays in the family",
			SessionRequest{Family: agentA + " Today is 2026-12-02.", Segments: seg(preamble + agentA + " Today is 2026-12-02.")},
			[]SessionCandidate{{Family: agentA + " Today is 2026-12-01.", Segments: seg(preamble + agentA + " Today is 2026-12-01.")}},
			SessionChoice{0, ChosenByPrefix}},
		{"no system prompt: the first messages decide",
			SessionRequest{Family: "write a parser", Segments: seg("<|im_start|>user\nwrite a parser")},
			[]SessionCandidate{{Family: "hello there", Segments: seg("<|im_start|>user\nhello there")}},
			SessionChoice{-1, ChosenNew}},
		{"empty and non-empty families differ",
			SessionRequest{Family: "", Segments: seg("x")},
			[]SessionCandidate{{Family: agentA, Segments: seg("x")}},
			SessionChoice{-1, ChosenNew}},
		{"a busy session of another branch is not waited for",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "task two")},
			[]SessionCandidate{{Family: agentA, Segments: seg(preamble+agentA, "task one"), Busy: true}},
			SessionChoice{-1, ChosenNew}},
		{"a busy session the request continues is waited for (a retry)",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "task one")},
			[]SessionCandidate{{Family: agentA, Segments: seg(preamble+agentA, "task one"), Busy: true}},
			SessionChoice{0, ChosenByPrefix}},
		{"an idle sibling beats opening a new one",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "task two")},
			[]SessionCandidate{
				{Family: agentA, Segments: seg(preamble+agentA, "task one"), Busy: true},
				{Family: agentA, Segments: seg(preamble+agentA, "task three"), LastUsed: 1},
			},
			SessionChoice{1, ChosenByPrefix}},
		{"longest prefix wins",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "u1", "a1", "u2")},
			[]SessionCandidate{
				{Family: agentA, Segments: seg(preamble+agentA, "x"), LastUsed: 9},
				{Family: agentA, Segments: seg(preamble+agentA, "u1", "a1"), LastUsed: 1},
			},
			SessionChoice{1, ChosenByPrefix}},
		{"ties go to the most recently used",
			SessionRequest{Family: agentA, Segments: seg(preamble+agentA, "new")},
			[]SessionCandidate{
				{Family: agentA, Segments: seg(preamble+agentA, "x"), LastUsed: 1},
				{Family: agentA, Segments: seg(preamble+agentA, "y"), LastUsed: 5},
				{Family: agentA, Segments: seg(preamble+agentA, "z"), LastUsed: 3},
			},
			SessionChoice{1, ChosenByPrefix}},
	}
	for _, tc := range tests {
		if got := ChooseSession(tc.req, tc.cands); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestSameFamily(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"", "", true},
		{"", "a", false},
		{"abcd", "abXX", true}, // 2 of 4
		{"abcd", "aXXX", false},
		{"abc", "abcdefgh", true},
		{"You are a coding agent.", "You are a title generator.", false},
	} {
		if got := SameFamily(tc.a, tc.b); got != tc.want {
			t.Errorf("SameFamily(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestEvictSession(t *testing.T) {
	seg := func(n int) []string { return []string{string(make([]byte, n))} }
	tests := []struct {
		name  string
		cands []SessionCandidate
		want  int
	}{
		{"empty", nil, -1},
		{"all busy", []SessionCandidate{{Busy: true}, {Busy: true}}, -1},
		{"least recently used side session first",
			[]SessionCandidate{
				{Key: "a", Segments: seg(1000), LastUsed: 1}, // main of a, oldest
				{Key: "a", Segments: seg(10), LastUsed: 3},
				{Key: "a", Segments: seg(20), LastUsed: 2},
			}, 2},
		{"mains go when no side session is idle",
			[]SessionCandidate{
				{Key: "a", Segments: seg(1000), LastUsed: 5},
				{Key: "b", Segments: seg(1000), LastUsed: 4},
				{Key: "a", Segments: seg(10), LastUsed: 1, Busy: true},
			}, 1},
	}
	for _, tc := range tests {
		if got := EvictSession(tc.cands); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A sub-agent (its own key, the main conversation's system prompt and
// tools, as opencode's task tool sends) opens a session of its own: the
// main session stays the main conversation's, and the daemon copies the
// shared KV across sessions instead.
func TestChooseSessionSubAgentOpensItsOwn(t *testing.T) {
	main := SessionCandidate{Key: "ses_main", Family: "You are opencode", Segments: []string{"sys", "tools", "turn 1"}, LastUsed: 2}
	req := SessionRequest{Key: "ses_sub", Family: "You are opencode", Segments: []string{"sys", "tools", "sub task"}}
	if got := ChooseSession(req, []SessionCandidate{main}); got.Index != -1 || got.How != ChosenNew {
		t.Fatalf("sub-agent chose %+v, want a new session", got)
	}
	// Its next request returns to its own session.
	sub := SessionCandidate{Key: "ses_sub", Family: "You are opencode", Segments: req.Segments, LastUsed: 3}
	req.Segments = append(req.Segments, "tool result")
	if got := ChooseSession(req, []SessionCandidate{main, sub}); got.Index != 1 || got.How != ChosenByKey {
		t.Fatalf("sub-agent's next request chose %+v", got)
	}
}
