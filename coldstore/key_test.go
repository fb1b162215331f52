package coldstore

import (
	"errors"
	"strings"
	"testing"
)

func TestBlockKeyStable(t *testing.T) {
	var chain [32]byte
	for i := range chain {
		chain[i] = byte(i)
	}
	c := Compat{ModelDigest: "abc", KVType: "f16", FlashAttention: true, Settings: "n_ctx=4096"}
	// Golden value: a change here changes every key on disk, which needs a
	// FormatVersion bump.
	const want = "6b1689c09dcd03b01f678639a79b84d90345b3c02eb8e29e1720b99c8927248f"
	if got := BlockKey(c, chain).String(); got != want {
		t.Fatalf("BlockKey = %s, want %s", got, want)
	}
	base := BlockKey(c, chain)
	variants := map[string]Compat{
		"digest":   {ModelDigest: "abd", KVType: "f16", FlashAttention: true, Settings: "n_ctx=4096"},
		"kvtype":   {ModelDigest: "abc", KVType: "q8_0", FlashAttention: true, Settings: "n_ctx=4096"},
		"fa":       {ModelDigest: "abc", KVType: "f16", Settings: "n_ctx=4096"},
		"unified":  {ModelDigest: "abc", KVType: "f16", FlashAttention: true, Unified: true, Settings: "n_ctx=4096"},
		"settings": {ModelDigest: "abc", KVType: "f16", FlashAttention: true, Settings: "n_ctx=8192"},
		// Field boundaries are length-prefixed: moving bytes between
		// fields changes the key.
		"shift": {ModelDigest: "abcf", KVType: "16", FlashAttention: true, Settings: "n_ctx=4096"},
	}
	seen := map[Key]string{base: "base"}
	for name, v := range variants {
		k := BlockKey(v, chain)
		if prev, dup := seen[k]; dup {
			t.Fatalf("%s collides with %s", name, prev)
		}
		seen[k] = name
	}
	chain[31] ^= 1
	if BlockKey(c, chain) == base {
		t.Fatal("chain change did not change the key")
	}
}

func TestParseKey(t *testing.T) {
	k := BlockKey(testCompat, [32]byte{1})
	got, err := ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("ParseKey(String()) = %v, %v", got, err)
	}
	if got, err := ParseKey(strings.ToUpper(k.String())); err != nil || got != k {
		t.Fatalf("upper case: %v, %v", got, err)
	}
	if k.String() != strings.ToLower(k.String()) || len(k.String()) != 64 {
		t.Fatalf("String not 64 lowercase hex: %q", k.String())
	}
	for _, bad := range []string{"", "zz", k.String()[:63], k.String() + "0", strings.Repeat("g", 64)} {
		if _, err := ParseKey(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("ParseKey(%q) = %v", bad, err)
		}
	}
}
