package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestControlSpansPiecesAndDigest(t *testing.T) {
	text := "<|im_start|>user\nhi <|im_start|><|im_end|>\n"
	s := Segment{ID: "m", Kind: KindUserTurn, Text: text, Control: []ControlSpan{{0, 12}, {32, 42}}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	var joined strings.Builder
	var controls []string
	for _, p := range s.Pieces() {
		joined.WriteString(p.Text)
		if p.Control {
			controls = append(controls, p.Text)
		}
	}
	if joined.String() != text || strings.Join(controls, ",") != "<|im_start|>,<|im_end|>" {
		t.Fatalf("pieces rejoin to %q, controls %q", joined.String(), controls)
	}
	plain := s
	plain.Control = nil
	if s.Digest() == plain.Digest() {
		t.Fatal("a segment with control spans has the digest of the same text without them")
	}
	other := s
	other.Control = []ControlSpan{{0, 12}}
	if s.Digest() == other.Digest() {
		t.Fatal("different control spans give one digest")
	}
	if got := plain.Pieces(); len(got) != 1 || got[0].Text != text || got[0].Control {
		t.Fatalf("pieces of a plain segment: %+v", got)
	}
}

func TestControlSpansValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seg   Segment
		wants string
	}{
		{"overlap", Segment{Text: "abcdef", Control: []ControlSpan{{0, 3}, {2, 4}}}, "out of order"},
		{"empty", Segment{Text: "abcdef", Control: []ControlSpan{{2, 2}}}, "empty"},
		{"outside", Segment{Text: "abc", Control: []ControlSpan{{1, 4}}}, "outside"},
		{"rune", Segment{Text: "aé", Control: []ControlSpan{{0, 2}}}, "splits a character"},
		{"tokens", Segment{Text: "ab", Tokens: []int32{1}, Control: []ControlSpan{{0, 1}}}, "together with tokens"},
	} {
		tc.seg.Kind = KindUserTurn
		err := tc.seg.Validate()
		if !errors.Is(err, ErrInvalidManifest) || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: got %v, want ErrInvalidManifest mentioning %q", tc.name, err, tc.wants)
		}
		m := Manifest{Segments: []Segment{tc.seg}}
		if err := m.Validate(); !errors.Is(err, ErrInvalidManifest) {
			t.Errorf("%s: manifest: got %v", tc.name, err)
		}
	}
}
