package policy

import (
	"encoding/hex"
	"fmt"
	"testing"
)

func cloneManifest(m *Manifest) *Manifest {
	c := &Manifest{Template: m.Template, Segments: make([]Segment, len(m.Segments))}
	for i, s := range m.Segments {
		s.Paths = append([]string(nil), s.Paths...)
		c.Segments[i] = s
	}
	return c
}

func TestManifestDigestStable(t *testing.T) {
	a, b := validManifest(), cloneManifest(validManifest())
	if a.Digest() != b.Digest() || a.Digest() != a.Digest() {
		t.Fatal("equal manifests give different digests")
	}
	// Pinned values: a change here changes every stored digest, so the
	// encoding's domain tag must change too.
	const wantManifest = "e73de8387c830fbf6240e9f986c053e0cca776ad71147c9726677623743a267a"
	if d := a.Digest(); hex.EncodeToString(d[:]) != wantManifest {
		t.Errorf("manifest digest = %x, want %s", d, wantManifest)
	}
	const wantSegment = "29d2c9ea05c2d79052a3cf0ab4ee0c0a8d51e194512dcabf9a6a368f7e94ca6f"
	if d := a.Segments[1].Digest(); hex.EncodeToString(d[:]) != wantSegment {
		t.Errorf("segment digest = %x, want %s", d, wantSegment)
	}
	var nilM *Manifest
	if nilM.Digest() != (&Manifest{}).Digest() {
		t.Error("nil manifest digest differs from empty")
	}
	s := validManifest().Segments[3]
	s2 := s
	s2.Paths = nil
	s3 := s2
	s3.Paths = []string{}
	if s2.Digest() != s3.Digest() {
		t.Error("nil and empty Paths digest differently")
	}
}

func TestManifestDigestSensitive(t *testing.T) {
	mutations := map[string]func(m *Manifest){
		"template":            func(m *Manifest) { m.Template = "llama3" },
		"template empty":      func(m *Manifest) { m.Template = "" },
		"id":                  func(m *Manifest) { m.Segments[0].ID = "sys2" },
		"kind":                func(m *Manifest) { m.Segments[0].Kind = KindTools },
		"class":               func(m *Manifest) { m.Segments[0].Class = ClassTaskPinned },
		"invalidate on edit":  func(m *Manifest) { m.Segments[0].InvalidateOnEdit = true },
		"invalidate on turn":  func(m *Manifest) { m.Segments[0].InvalidateOnTurn = true },
		"paths added":         func(m *Manifest) { m.Segments[0].Paths = []string{"x"} },
		"path changed":        func(m *Manifest) { m.Segments[3].Paths[1] = "policy/doc2.go" },
		"paths reordered":     func(m *Manifest) { p := m.Segments[3].Paths; p[0], p[1] = p[1], p[0] },
		"paths joined":        func(m *Manifest) { m.Segments[3].Paths = []string{"main.gopolicy/doc.go"} },
		"text":                func(m *Manifest) { m.Segments[4].Text = "Fix the bug! ✓" },
		"text moved":          func(m *Manifest) { m.Segments[3].Text += "F"; m.Segments[4].Text = m.Segments[4].Text[1:] },
		"text into id":        func(m *Manifest) { m.Segments[4].ID += m.Segments[4].Text; m.Segments[4].Text = "" },
		"stable":              func(m *Manifest) { m.Segments[3].Stable = true },
		"segments reordered":  func(m *Manifest) { m.Segments[3], m.Segments[4] = m.Segments[4], m.Segments[3] },
		"segment removed":     func(m *Manifest) { m.Segments = m.Segments[:4] },
		"segment added":       func(m *Manifest) { m.Segments = append(m.Segments, Segment{Kind: KindTerminal}) },
		"empty segment added": func(m *Manifest) { m.Segments = append(m.Segments, Segment{}) },
	}
	seen := map[[32]byte]string{validManifest().Digest(): "base"}
	segSeen := map[[32]byte]string{}
	for name, mod := range mutations {
		m := validManifest()
		mod(m)
		d := m.Digest()
		if other, dup := seen[d]; dup {
			t.Errorf("%s: digest equals that of %s", name, other)
		}
		seen[d] = name
		for i, s := range m.Segments {
			segSeen[s.Digest()] = fmt.Sprintf("%s/%d", name, i)
		}
	}
	// Segment digests: each field matters, and differs from a manifest's.
	base := validManifest().Segments[3]
	segMuts := []func(s *Segment){
		func(s *Segment) { s.ID = "" },
		func(s *Segment) { s.Kind = KindTerminal },
		func(s *Segment) { s.Class = ClassVolatile },
		func(s *Segment) { s.InvalidateOnEdit = false },
		func(s *Segment) { s.InvalidateOnTurn = true },
		func(s *Segment) { s.Paths = s.Paths[:1] },
		func(s *Segment) { s.Text = "" },
		func(s *Segment) { s.Stable = true },
	}
	bd := base.Digest()
	for i, mod := range segMuts {
		s := base
		s.Paths = append([]string(nil), base.Paths...)
		mod(&s)
		if s.Digest() == bd {
			t.Errorf("segment mutation %d leaves the digest unchanged", i)
		}
	}
	if bd == (&Manifest{Segments: []Segment{base}}).Digest() {
		t.Error("segment and one-segment manifest share a digest")
	}
}

func TestStablePrefixDigest(t *testing.T) {
	a, b := validManifest(), validManifest()
	b.Segments[4].Text = "another turn"
	b.Segments = append(b.Segments, Segment{Kind: KindTerminal, Text: "$ go test"})
	if a.StablePrefixDigest() != b.StablePrefixDigest() {
		t.Error("suffix change altered the stable prefix digest")
	}
	if a.Digest() == b.Digest() {
		t.Error("suffix change left the manifest digest unchanged")
	}
	b.Segments[2].Text = "changed map"
	if a.StablePrefixDigest() == b.StablePrefixDigest() {
		t.Error("prefix change left the stable prefix digest unchanged")
	}
	c := validManifest()
	c.Template = "other"
	if a.StablePrefixDigest() == c.StablePrefixDigest() {
		t.Error("template change left the stable prefix digest unchanged")
	}
	want := (&Manifest{Template: a.Template, Segments: a.Segments[:3]}).Digest()
	if a.StablePrefixDigest() != want {
		t.Error("StablePrefixDigest differs from the digest of the prefix manifest")
	}
	var nilM *Manifest
	if nilM.StablePrefixDigest() != (&Manifest{}).Digest() {
		t.Error("nil manifest")
	}
}

func TestCompatKey(t *testing.T) {
	base := CompatKey{ModelDigest: "abc123", Template: "chatml", KVType: KVTypeQ8_0, FlashAttention: true, ContextTokens: 32768, FormatVersion: 1}
	same := base
	if base != same || base.String() != same.String() || base.Digest() != same.Digest() {
		t.Fatal("equal keys differ")
	}
	if s := base.String(); len(s) != 16 {
		t.Errorf("String() = %q, want 16 hex digits", s)
	} else if _, err := hex.DecodeString(s); err != nil {
		t.Errorf("String() = %q is not hex", s)
	}
	const want = "abdec3ba24a03108"
	if base.String() != want {
		t.Errorf("String() = %s, want pinned %s", base.String(), want)
	}
	muts := map[string]func(k *CompatKey){
		"model":    func(k *CompatKey) { k.ModelDigest = "abc124" },
		"template": func(k *CompatKey) { k.Template = "llama3" },
		"kv type":  func(k *CompatKey) { k.KVType = KVTypeF16 },
		"flash":    func(k *CompatKey) { k.FlashAttention = false },
		"context":  func(k *CompatKey) { k.ContextTokens = 32769 },
		"format":   func(k *CompatKey) { k.FormatVersion = 2 },
		"shift":    func(k *CompatKey) { k.ModelDigest, k.Template = "abc123chat", "ml" },
	}
	seen := map[string]string{base.String(): "base"}
	for name, mod := range muts {
		k := base
		mod(&k)
		if k == base {
			t.Errorf("%s: key still equal", name)
		}
		if other, dup := seen[k.String()]; dup {
			t.Errorf("%s: String() equals that of %s", name, other)
		}
		seen[k.String()] = name
	}
}
