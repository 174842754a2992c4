package shape_test

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
)

func TestTrim(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		s             string
		budget        int
		want          string
		wantTruncated bool
		wantOriginal  int
	}{
		{"zero budget means no trim", "abcdef", 0, "abcdef", false, 6},
		{"negative budget means no trim", "abcdef", -1, "abcdef", false, 6},
		{"shorter than budget", "abc", 10, "abc", false, 3},
		{"exactly the budget", "abcdef", 6, "abcdef", false, 6},
		{"one over", "abcdefg", 6, "abcdef\n[truncated — 7 chars total]", true, 7},
		{"cut", "abcdef", 3, "abc\n[truncated — 6 chars total]", true, 6},
		{"two-byte code points", "ééééé", 2, "éé\n[truncated — 5 chars total]", true, 5},
		{"four-byte code points", "😀😀😀", 1, "😀\n[truncated — 3 chars total]", true, 3},
		{"mixed widths", "a😀éb", 3, "a😀é\n[truncated — 4 chars total]", true, 4},
		{"multi-byte within budget in bytes-terms over", "éééé", 4, "éééé", false, 4},
		{"no digit separators", strings.Repeat("x", 1234567), 2, "xx\n[truncated — 1234567 chars total]", true, 1234567},
		{"empty", "", 5, "", false, 0},
		{"budget of one", "ab", 1, "a\n[truncated — 2 chars total]", true, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, truncated, original := shape.Trim(tt.s, tt.budget)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantTruncated, truncated)
			require.Equal(t, tt.wantOriginal, original)
		})
	}
}

func TestTrimMarkerUsesEmDash(t *testing.T) {
	t.Parallel()
	got, _, _ := shape.Trim("abc", 1)
	require.Contains(t, got, "\u2014")
	require.Equal(t, "a\n[truncated \u2014 3 chars total]", got)
}

func TestBudget(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		resultBudget   int64
		maxResultChars int
		want           int
	}{
		{"neither set", 0, 0, 0},
		{"negatives ignored", -5, -7, 0},
		{"only call budget", 80000, 0, 80000},
		{"only tool cap", 0, 40000, 40000},
		{"call budget smaller", 20000, 40000, 20000},
		{"tool cap smaller", 80000, 20000, 20000},
		{"equal", 100, 100, 100},
		{"negative call budget ignored", -1, 300, 300},
		{"negative tool cap ignored", 300, -1, 300},
		{"huge call budget clamps", math.MaxInt64, 0, math.MaxInt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, shape.Budget(tt.resultBudget, tt.maxResultChars))
		})
	}
}
