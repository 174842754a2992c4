package shape_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		s       string
		secrets []string
		want    string
	}{
		{"no secrets", "token abc", nil, "token abc"},
		{"empty secret ignored", "token abc", []string{""}, "token abc"},
		{"one secret", "Authorization: Bearer s3cr3t", []string{"s3cr3t"}, "Authorization: Bearer [REDACTED]"},
		{"every occurrence", "s3cr3t and s3cr3t", []string{"s3cr3t"}, "[REDACTED] and [REDACTED]"},
		{"several secrets", "user=alice pass=hunter2", []string{"alice", "hunter2"}, "user=[REDACTED] pass=[REDACTED]"},
		{"longer secret removed whole", "key=abcdef", []string{"abc", "abcdef"}, "key=[REDACTED]"},
		{"longer secret removed whole in any order", "key=abcdef", []string{"abcdef", "abc"}, "key=[REDACTED]"},
		{"overlapping secrets fully removed", "xabcdefx", []string{"abcd", "cdef"}, "x[REDACTED]x"},
		{"self-overlapping occurrences", "aaa", []string{"aa"}, "[REDACTED]"},
		{"touching occurrences stay separate", "abab", []string{"ab"}, "[REDACTED][REDACTED]"},
		{"never matches inside a replacement", "x", []string{"x", "RED"}, "[REDACTED]"},
		{"secret longer than text", "ab", []string{"abc"}, "ab"},
		{"multi-byte secret", "mot de passe: pâté😀", []string{"pâté😀"}, "mot de passe: [REDACTED]"},
		{"whole string", "s3cr3t", []string{"s3cr3t"}, "[REDACTED]"},
		{"duplicates", "s3cr3t", []string{"s3cr3t", "s3cr3t"}, "[REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, shape.Redact(tt.s, tt.secrets))
		})
	}
}

type withSecret struct {
	Token string `json:"token"`
	N     int    `json:"n"`
}

func TestRedactResult(t *testing.T) {
	t.Parallel()
	cost := 0.25
	in := tool.Result{
		OK:    true,
		Value: "value s3cr3t",
		Structured: map[string]any{
			"plain":   "s3cr3t",
			"nested":  map[string]any{"list": []any{"a", "s3cr3t", 3.5}},
			"strings": []string{"s3cr3t"},
			"s3cr3t":  true,
			"struct":  withSecret{Token: "s3cr3t", N: 7},
			"num":     42,
		},
		CostUSD: &cost,
	}
	out := shape.RedactResult(in, []string{"s3cr3t"})
	require.Equal(t, "value [REDACTED]", out.Value)
	require.Equal(t, map[string]any{
		"plain":      "[REDACTED]",
		"nested":     map[string]any{"list": []any{"a", "[REDACTED]", 3.5}},
		"strings":    []string{"[REDACTED]"},
		"[REDACTED]": true,
		"struct":     map[string]any{"token": "[REDACTED]", "n": json.Number("7")},
		"num":        42,
	}, out.Structured)
	require.Same(t, &cost, out.CostUSD)
	require.Equal(t, "s3cr3t", in.Structured["plain"], "the input is not changed in place")
	require.Equal(t, []any{"a", "s3cr3t", 3.5}, in.Structured["nested"].(map[string]any)["list"])

	failed := shape.RedactResult(tool.Fail(tool.CodeExecutionFailed, "bad token s3cr3t"), []string{"s3cr3t"})
	require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "bad token [REDACTED]"), failed)

	require.Equal(t, in, shape.RedactResult(in, []string{""}), "no non-empty secret: unchanged")
}
