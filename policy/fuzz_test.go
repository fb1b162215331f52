package policy

import (
	"errors"
	"testing"
)

// byteReader decodes fuzz input; reads past the end give zeros.
type byteReader struct{ b []byte }

func (r *byteReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *byteReader) str() string {
	n := min(int(r.byte()%16), len(r.b))
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// manifestFromBytes builds an arbitrary manifest, nil included, from b.
func manifestFromBytes(b []byte) *Manifest {
	r := &byteReader{b}
	head := r.byte()
	if head == 0xff {
		return nil
	}
	m := &Manifest{Template: r.str()}
	for n := int(head % 10); n > 0; n-- {
		s := Segment{ID: r.str(), Kind: SegmentKind(int8(r.byte())), Class: CacheClass(int8(r.byte()))}
		fl := r.byte()
		s.InvalidateOnEdit, s.InvalidateOnTurn, s.Stable = fl&1 != 0, fl&2 != 0, fl&4 != 0
		for np := int(fl>>3) % 4; np > 0; np-- {
			s.Paths = append(s.Paths, r.str())
		}
		s.Text = r.str()
		m.Segments = append(m.Segments, s)
	}
	return m
}

func FuzzValidate(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff})
	f.Add([]byte{2, 1, 't', 1, 'a', 1, 0, 4, 1, 'x', 1, 'b', 6, 3, 9, 1, 'p', 0})
	f.Add([]byte{3, 0, 0, 1, 0, 4, 0, 0, 2, 0, 0, 0, 8, 3, 4, 2, 0xc0, 0xaf})
	f.Fuzz(func(t *testing.T, data []byte) {
		m := manifestFromBytes(data)
		err := m.Validate()
		b := m.Boundary()
		d := m.Digest()
		_ = m.StablePrefixDigest()
		if m != nil {
			for _, s := range m.Segments {
				_ = s.Validate()
				_ = s.Digest()
				_ = s.EffectiveClass().EvictionRank()
				_ = EditInvalidates(s, s.Text)
			}
		}
		if d != m.Digest() {
			t.Fatal("digest not deterministic")
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidManifest) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		stable := 0
		for i, s := range m.Segments {
			if s.Stable {
				stable++
				if i >= b {
					t.Fatalf("stable segment %d at or past boundary %d", i, b)
				}
			}
			if !s.Kind.Valid() || !s.EffectiveClass().Valid() || s.EffectiveClass() == ClassUnspecified {
				t.Fatalf("valid manifest has segment %d with kind %v class %v", i, s.Kind, s.EffectiveClass())
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("segment %d of a valid manifest fails Validate: %v", i, err)
			}
		}
		if stable != b || len(m.StablePrefix()) != b || len(m.Suffix()) != len(m.Segments)-b {
			t.Fatalf("boundary %d, %d stable segments", b, stable)
		}
	})
}
