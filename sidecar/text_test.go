package sidecar

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTextOutHoldsSplitCharacters: a character split over tokens is sent
// once complete, and pieces are always valid UTF-8.
func TestTextOutHoldsSplitCharacters(t *testing.T) {
	euro := "€" // 3 bytes
	var o textOut
	var got []string
	for _, p := range []string{"a", euro[:1], euro[1:2], euro[2:] + "b", "\xff", "c", "é"[:1]} {
		s := o.push(p)
		if !utf8.ValidString(s) {
			t.Fatalf("piece %q is not valid UTF-8", s)
		}
		got = append(got, s)
	}
	if strings.Join(got, "|") != "a|||€b|\uFFFD|c|" {
		t.Fatalf("pieces %q", got)
	}
	if f := o.final(); f != "a€b\uFFFDc\uFFFD" {
		t.Fatalf("final %q", f)
	}
}

func TestTextOutStopCutsBeforeStopString(t *testing.T) {
	var o textOut
	o.push("Hello wor")
	if o.stop([]string{"world"}) {
		t.Fatal("stopped early")
	}
	o.push("ld and more")
	if !o.stop([]string{"xyz", "world"}) {
		t.Fatal("stop string not seen")
	}
	if f := o.final(); f != "Hello " {
		t.Fatalf("final %q", f)
	}
}
