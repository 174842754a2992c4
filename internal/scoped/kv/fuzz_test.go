package kv

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// natsKVKey is the key rule of nats.go's jetstream KV (validKeyRe plus the
// dot rules of keyValid).
var natsKVKey = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func validNATSKVKey(k string) bool {
	return natsKVKey.MatchString(k) && !strings.HasPrefix(k, ".") && !strings.HasSuffix(k, ".") && !strings.Contains(k, "..")
}

func FuzzKVKeyEncoding(f *testing.F) {
	seeds := [][4]string{
		{"tool:a", "b.c", "tool:a.b", "c"},
		{"tool:a", "*", "tool:a", ">"},
		{"session:x", "a b", "session:x a", "b"},
		{"personality:ü", "日本語", "personality:ü", "日本"},
		{"tool:t", ".", "tool:t", ".."},
		{"tool:t", "\xff", "tool:t", "\xfe"},
		{"s", "k", "s", "k"},
		{"a", "bc", "ab", "c"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, s1, k1, s2, k2 string) {
		if s1 == "" || s2 == "" || k1 == "" || k2 == "" {
			t.Skip("scope ids and keys are never empty")
		}
		e1 := encodeKey(encodeScope(s1), k1)
		e2 := encodeKey(encodeScope(s2), k2)
		for _, e := range []string{e1, e2} {
			if !validNATSKVKey(e) {
				t.Fatalf("encoding %q is not a valid NATS KV key", e)
			}
			if strings.Count(e, ".") != 1 {
				t.Fatalf("encoding %q is not exactly two tokens", e)
			}
		}
		if (e1 == e2) != (s1 == s2 && k1 == k2) {
			t.Fatalf("encode(%q,%q)=%q, encode(%q,%q)=%q: not injective", s1, k1, e1, s2, k2, e2)
		}
		// A key is listed under its own scope only, and decodes to itself.
		if got, ok := decodeKey(encodeScope(s1), e1); !ok || got != k1 {
			t.Fatalf("decodeKey(encode(%q,%q)) = %q, %v", s1, k1, got, ok)
		}
		if _, ok := decodeKey(encodeScope(s2), e1); ok != (s1 == s2) {
			t.Fatalf("key of scope %q decodes under scope %q: %v", s1, s2, ok)
		}
		if strings.HasPrefix(e1, encodeScope(s2)+".") != (s1 == s2) {
			t.Fatalf("scope filter of %q matches a key of scope %q", s2, s1)
		}
		if utf8.ValidString(k1) && len(k1) <= MaxKeyBytes && len(e1) > len(encodeScope(s1))+1+(MaxKeyBytes*4+2)/3 {
			t.Fatalf("encoding of a %d-byte key is %d bytes", len(k1), len(e1))
		}
	})
}

func FuzzDecodeKey(f *testing.F) {
	f.Add("dG9vbDph", "dG9vbDph.Yg")
	f.Add("dG9vbDph", "dG9vbDph.Yh") // non-canonical
	f.Add("dG9vbDph", "dG9vbDph.")
	f.Add("dG9vbDph", "dG9vbDphYg.Yg")
	f.Add("dG9vbDph", "dG9vbDph.\n")   // the decoder skips newlines
	f.Add("dG9vbDph", "dG9vbDph.Yg\r") // so "Yg\r" would decode like "Yg"
	f.Fuzz(func(t *testing.T, encScope, bucketKey string) {
		key, ok := decodeKey(encScope, bucketKey)
		if ok && encodeKey(encScope, key) != bucketKey {
			t.Fatalf("decodeKey(%q, %q) = %q, which encodes to %q", encScope, bucketKey, key, encodeKey(encScope, key))
		}
	})
}
