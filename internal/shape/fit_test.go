package shape_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
)

func TestJSONStringLen(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"", "abc", "a\"b\\c", "\b\f\n\r\t", "\x00\x01\x1f", "<a href=\"x\">&</a>", "é😀—", "\u2028\u2029",
		"\xff\xfe", "ok\xc3", strings.Repeat("\x00", 100),
	} {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, len(b), shape.JSONStringLen(s), "%q", s)
	}
}

func TestTrimFit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		s             string
		budget, max   int
		want          string
		wantTruncated bool
	}{
		{"fits both", "abc", 10, 100, "abc", false},
		{"no budget, fits", "abc", 0, 5, "abc", false},
		{"budget cuts as Trim does", "abcdef", 3, 1000, "abc\n[truncated — 6 chars total]", true},
		// The marker "\n[truncated — 40 chars total]" encodes to 34 bytes
		// with its quotes; 37 leaves room for three ASCII characters.
		{"size cuts", strings.Repeat("a", 40), 0, 37, "aaa\n[truncated — 40 chars total]", true},
		{"size cuts before the budget", strings.Repeat("a", 40), 5, 36, "aa\n[truncated — 40 chars total]", true},
		{"escapes count: NUL takes six bytes", strings.Repeat("\x00", 10), 0, 46, "\x00\x00\n[truncated — 10 chars total]", true},
		{"never splits a code point", strings.Repeat("😀", 10), 0, 41, "😀\n[truncated — 10 chars total]", true},
		{"not even the marker fits", strings.Repeat("a", 40), 0, 10, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, truncated, original := shape.TrimFit(tt.s, tt.budget, tt.max)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantTruncated, truncated)
			require.Equal(t, utf8.RuneCountInString(tt.s), original)
			if got != "" {
				require.LessOrEqual(t, shape.JSONStringLen(got), tt.max)
			}
			if tt.budget > 0 && tt.max >= 1000 {
				trimmed, _, _ := shape.Trim(tt.s, tt.budget)
				require.Equal(t, trimmed, got, "with room to spare TrimFit is Trim")
			}
		})
	}
}

func FuzzTrimFit(f *testing.F) {
	f.Add("hello <world> & \x00 é😀", 5, 40)
	f.Add(strings.Repeat("\u2028a", 50), 0, 64)
	f.Fuzz(func(t *testing.T, s string, budget, maxJSON int) {
		if maxJSON < 0 || maxJSON > 1<<20 {
			return
		}
		b, _ := json.Marshal(s)
		if shape.JSONStringLen(s) != len(b) {
			t.Fatalf("JSONStringLen(%q) = %d, json.Marshal gives %d", s, shape.JSONStringLen(s), len(b))
		}
		out, truncated, _ := shape.TrimFit(s, budget, maxJSON)
		if out == "" && truncated {
			return
		}
		if enc, _ := json.Marshal(out); len(enc) > maxJSON {
			t.Fatalf("TrimFit(%q, %d, %d) = %q encodes to %d bytes", s, budget, maxJSON, out, len(enc))
		}
		if !truncated && out != s {
			t.Fatalf("not truncated but changed: %q", out)
		}
		if truncated && utf8.ValidString(s) && !utf8.ValidString(out) {
			t.Fatalf("split a code point: %q", out)
		}
	})
}
