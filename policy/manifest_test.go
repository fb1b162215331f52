package policy

import (
	"errors"
	"strings"
	"testing"
)

func validManifest() *Manifest {
	return &Manifest{
		Template: "chatml",
		Segments: []Segment{
			{ID: "sys", Kind: KindSystem, Text: "You are a coding agent.", Stable: true},
			{ID: "rules", Kind: KindRepoRules, InvalidateOnEdit: true, Paths: []string{"AGENTS.md"}, Text: "Use gofmt.", Stable: true},
			{ID: "map", Kind: KindRepoMap, Class: ClassRepoMap, Text: "main.go\npolicy/", Stable: true},
			{ID: "diff", Kind: KindDiff, InvalidateOnEdit: true, Paths: []string{"main.go", "policy/doc.go"}, Text: "--- a/main.go"},
			{ID: "turn", Kind: KindUserTurn, InvalidateOnTurn: true, Text: "Fix the bug. ✓"},
		},
	}
}

func TestValidateValid(t *testing.T) {
	cases := map[string]*Manifest{
		"typical": validManifest(),
		"unspecified class and empty ids": {Segments: []Segment{
			{Kind: KindSystem, Stable: true}, {Kind: KindPinned, Stable: true}, {Kind: KindDiff}, {Kind: KindTerminal},
		}},
		"all volatile":             {Segments: []Segment{{Kind: KindUserTurn}}},
		"paths without invalidate": {Segments: []Segment{{Kind: KindPinned, Paths: []string{"a.go"}, Stable: true}}},
		"at MaxSegments":           {Segments: make([]Segment, MaxSegments)},
		"at MaxManifestBytes": func() *Manifest {
			half := strings.Repeat("x", MaxManifestBytes/2)
			return &Manifest{Segments: []Segment{{Kind: KindPinned, Text: half}, {Kind: KindPinned, Text: half}}}
		}(),
	}
	for i := range cases["at MaxSegments"].Segments {
		cases["at MaxSegments"].Segments[i].Kind = KindTerminal
	}
	for name, m := range cases {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	with := func(mod func(m *Manifest)) *Manifest {
		m := validManifest()
		mod(m)
		return m
	}
	tooMany := &Manifest{Segments: make([]Segment, MaxSegments+1)}
	for i := range tooMany.Segments {
		tooMany.Segments[i].Kind = KindTerminal
	}
	half := strings.Repeat("x", MaxManifestBytes/2)
	tests := []struct {
		name string
		m    *Manifest
		want []string // substrings of the message
	}{
		{"nil", nil, []string{"nil manifest"}},
		{"no segments", &Manifest{Template: "t"}, []string{"no segments"}},
		{"too many segments", tooMany, []string{"4097 segments", "MaxSegments"}},
		{"template not UTF-8", with(func(m *Manifest) { m.Template = "\xff" }), []string{"template"}},
		{"unspecified kind", with(func(m *Manifest) { m.Segments[1].Kind = KindUnspecified }), []string{`segment 1 (id "rules")`, "unknown kind unspecified"}},
		{"undefined kind", with(func(m *Manifest) { m.Segments[2].Kind = 9 }), []string{"segment 2", "SegmentKind(9)"}},
		{"negative kind", with(func(m *Manifest) { m.Segments[0].Kind = -3 }), []string{"segment 0", "unknown kind"}},
		{"undefined class", with(func(m *Manifest) { m.Segments[3].Class = 4 }), []string{`segment 3 (id "diff")`, "unknown class CacheClass(4)"}},
		{"negative class", with(func(m *Manifest) { m.Segments[4].Class = -1 }), []string{"segment 4", "unknown class"}},
		{"duplicate id", with(func(m *Manifest) { m.Segments[4].ID = "rules" }), []string{`segment 4 (id "rules")`, "duplicate id (also segment 1)"}},
		{"stable after non-stable", with(func(m *Manifest) { m.Segments[4].Stable = true }), []string{`segment 4 (id "turn")`, `non-stable segment 3 (id "diff")`, "prefix"}},
		{"stable after non-stable in prefix", with(func(m *Manifest) { m.Segments[1].Stable = false }), []string{"segment 2", "non-stable segment 1"}},
		{"invalidate on edit without paths", with(func(m *Manifest) { m.Segments[1].Paths = nil }), []string{"segment 1", "invalidate_on_edit", "paths is empty"}},
		{"empty path", with(func(m *Manifest) { m.Segments[3].Paths[1] = "" }), []string{"segment 3", "paths[1] is empty"}},
		{"path not UTF-8", with(func(m *Manifest) { m.Segments[3].Paths[0] = "a\xc0.go" }), []string{"segment 3", "paths[0]", "UTF-8"}},
		{"text not UTF-8", with(func(m *Manifest) { m.Segments[0].Text = "ok\xfe" }), []string{`segment 0 (id "sys")`, "text is not valid UTF-8"}},
		{"id not UTF-8", with(func(m *Manifest) { m.Segments[0].ID = "\xfe" }), []string{"segment 0", "id is not valid UTF-8"}},
		{"text over limit", &Manifest{Segments: []Segment{{Kind: KindPinned, Text: half}, {Kind: KindPinned, Text: half}, {ID: "last", Kind: KindDiff, Text: "x"}}},
			[]string{`segment 2 (id "last")`, "MaxManifestBytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("Validate = %v, want ErrInvalidManifest", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestSegmentValidate(t *testing.T) {
	if err := (Segment{Kind: KindDiff, InvalidateOnEdit: true, Paths: []string{"a"}}).Validate(); err != nil {
		t.Errorf("valid segment: %v", err)
	}
	for name, s := range map[string]Segment{
		"no kind":        {ID: "x"},
		"bad class":      {Kind: KindDiff, Class: 7},
		"edit no paths":  {Kind: KindDiff, InvalidateOnEdit: true},
		"text not UTF-8": {Kind: KindDiff, Text: "\xff"},
	} {
		if err := s.Validate(); !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("%s: Validate = %v, want ErrInvalidManifest", name, err)
		}
	}
}

func TestBoundary(t *testing.T) {
	seg := func(stable bool) Segment { return Segment{Kind: KindPinned, Stable: stable} }
	tests := []struct {
		name string
		segs []Segment
		want int
	}{
		{"empty", nil, 0},
		{"all stable", []Segment{seg(true), seg(true)}, 2},
		{"none stable", []Segment{seg(false), seg(false)}, 0},
		{"mixed", []Segment{seg(true), seg(true), seg(false)}, 2},
		{"invalid order stops at first non-stable", []Segment{seg(true), seg(false), seg(true)}, 1},
	}
	for _, tc := range tests {
		m := &Manifest{Segments: tc.segs}
		if got := m.Boundary(); got != tc.want {
			t.Errorf("%s: Boundary = %d, want %d", tc.name, got, tc.want)
		}
		if p, s := m.StablePrefix(), m.Suffix(); len(p) != tc.want || len(p)+len(s) != len(tc.segs) {
			t.Errorf("%s: prefix %d suffix %d", tc.name, len(p), len(s))
		}
	}
	var nilM *Manifest
	if nilM.Boundary() != 0 || nilM.StablePrefix() != nil || nilM.Suffix() != nil {
		t.Error("nil manifest")
	}

	m := validManifest()
	if m.Boundary() != 3 {
		t.Fatalf("Boundary = %d, want 3", m.Boundary())
	}
	prefix, suffix := m.StablePrefix(), m.Suffix()
	if prefix[0].ID != "sys" || prefix[2].ID != "map" || suffix[0].ID != "diff" || suffix[1].ID != "turn" {
		t.Errorf("prefix/suffix ids wrong")
	}
	// Appending to the prefix must not overwrite the suffix.
	_ = append(prefix, Segment{ID: "new"})
	if m.Segments[3].ID != "diff" {
		t.Error("append to StablePrefix clobbered the suffix")
	}
}

func TestInvalidates(t *testing.T) {
	s := Segment{Kind: KindDiff, InvalidateOnEdit: true, Paths: []string{"policy/doc.go", "./main.go", "a/../b.go"}}
	for path, want := range map[string]bool{
		"policy/doc.go": true, "policy//doc.go": true, "./policy/doc.go": true, "main.go": true, "b.go": true,
		"policy/other.go": false, "policy": false, "": false, "a/b.go": false,
	} {
		if got := EditInvalidates(s, path); got != want {
			t.Errorf("EditInvalidates(%q) = %v, want %v", path, got, want)
		}
	}
	s.InvalidateOnEdit = false
	if EditInvalidates(s, "main.go") {
		t.Error("EditInvalidates without InvalidateOnEdit")
	}
	if TurnInvalidates(Segment{}) || !TurnInvalidates(Segment{InvalidateOnTurn: true}) {
		t.Error("TurnInvalidates wrong")
	}
}
