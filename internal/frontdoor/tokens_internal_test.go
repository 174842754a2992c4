package frontdoor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestParseTokens(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		doc      string
		problems []string
	}{
		{"valid", "tokens:\n- {token: 0123456789abcdef, personality: a, name: ci}\n- {token: fedcba9876543210, personality: b}\n", nil},
		{"not YAML", "tokens: [", []string{"yaml: line 1: did not find expected node content"}},
		{"unknown key", "tokens: []\nextra: 1\n", []string{`unknown field "extra"`}},
		{"unknown entry key", "tokens: [{token: 0123456789abcdef, personality: a, scope: all}]", []string{`unknown field "scope"`}},
		{"repeated key", "tokens: []\ntokens: []\n", []string{`key "tokens" already set in map`}},
		{"no tokens", "tokens: []\n", []string{"tokens: no tokens; a front door without tokens would refuse every request"}},
		{"empty file", "", []string{"tokens: no tokens"}},
		{"empty token", "tokens: [{token: '', personality: a}]", []string{"tokens[0].token: must not be empty"}},
		{"short token", "tokens: [{token: abc, personality: a}]", []string{"tokens[0].token: too short (3 characters); use at least 16"}},
		{"token with a space", "tokens: [{token: '0123456789 abcdef', personality: a}]", []string{"tokens[0].token: must not contain spaces or control characters"}},
		{"missing personality", "tokens: [{token: 0123456789abcdef}]", []string{"tokens[0].personality must not be empty"}},
		{"bad personality", "tokens: [{token: 0123456789abcdef, personality: a.b}]", []string{`tokens[0].personality "a.b" must match`}},
		{"duplicate", "tokens:\n- {token: 0123456789abcdef, personality: a}\n- {token: 0123456789abcdef, personality: b}\n",
			[]string{"tokens[1].token: the same token as tokens[0]; every token must be unique"}},
		{"every problem at once", "tokens:\n- {token: '', personality: a}\n- {token: x, personality: ''}\n",
			[]string{"tokens[0].token: must not be empty", "tokens[1].token: too short", "tokens[1].personality must not be empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tokens, problems := ParseTokens([]byte(tc.doc))
			if tc.problems == nil {
				require.Empty(t, problems)
				require.NotNil(t, tokens)
				return
			}
			require.Nil(t, tokens)
			require.Len(t, problems, len(tc.problems), "%q", problems)
			for i, want := range tc.problems {
				require.Contains(t, problems[i], want)
			}
			for _, p := range problems {
				require.NotContains(t, p, "0123456789abcdef", "token values never appear in problems")
			}
		})
	}
}

func TestLoadTokensNamesTheFile(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(file, []byte("tokens: [{token: short, personality: a}]"), 0o600))
	_, err := LoadTokens(file)
	var te *TokensError
	require.ErrorAs(t, err, &te)
	require.Equal(t, file, te.File)
	require.True(t, strings.HasPrefix(err.Error(), "tokens file "+file+": tokens[0].token: too short"), err.Error())
}

func TestVerifyMapsTokensToPersonalities(t *testing.T) {
	t.Parallel()
	tokens, problems := ParseTokens([]byte("tokens:\n" +
		"- {token: aaaaaaaaaaaaaaaa, personality: alpha, name: agent-a}\n" +
		"- {token: bbbbbbbbbbbbbbbb, personality: beta}\n" +
		"- {token: cccccccccccccccc, personality: alpha, name: agent-c}\n"))
	require.Empty(t, problems)
	require.Equal(t, []string{"alpha", "beta"}, tokens.Personalities())
	for _, tc := range []struct{ token, personality, name, user string }{
		{"aaaaaaaaaaaaaaaa", "alpha", "agent-a", "tokens[0]"},
		{"bbbbbbbbbbbbbbbb", "beta", "tokens[1]", "tokens[1]"},
		{"cccccccccccccccc", "alpha", "agent-c", "tokens[2]"},
	} {
		ti, err := tokens.verify(context.Background(), tc.token, nil)
		require.NoError(t, err)
		require.Equal(t, tc.personality, tokenPersonality(ti))
		require.Equal(t, tc.name, tokenLabel(ti))
		require.Equal(t, tc.user, ti.UserID, "each token its own user: a session is bound to the token that opened it")
	}
	for _, bad := range []string{"", "aaaaaaaaaaaaaaa", "aaaaaaaaaaaaaaaaa", "AAAAAAAAAAAAAAAA"} {
		_, err := tokens.verify(context.Background(), bad, nil)
		require.True(t, errors.Is(err, auth.ErrInvalidToken), "%q", bad)
	}
	require.Empty(t, tokenPersonality(nil))
}

// FuzzParseTokens checks that any document either parses into tokens that
// all verify, or yields problems, and never echoes a token value.
func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("tokens:\n- {token: 0123456789abcdef, personality: a, name: ci}\n"))
	f.Add([]byte("tokens: [{token: '', personality: a}]"))
	f.Add([]byte("tokens:\n- {token: 0123456789abcdef, personality: a}\n- {token: 0123456789abcdef, personality: b}\n"))
	f.Add([]byte("{\"tokens\": [{\"token\": \"x\\u0000yyyyyyyyyyyyyyyy\", \"personality\": \"p\"}]}"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		tokens, problems := ParseTokens(doc)
		if (tokens == nil) == (len(problems) == 0) {
			t.Fatalf("tokens %v with problems %q", tokens, problems)
		}
		if tokens == nil {
			return
		}
		var parsed tokensFile
		if err := yaml.UnmarshalStrict(doc, &parsed); err != nil {
			t.Fatalf("parsed by ParseTokens but not by strict YAML: %v", err)
		}
		for _, e := range parsed.Tokens {
			ti, err := tokens.verify(context.Background(), e.Token, nil)
			if err != nil || tokenPersonality(ti) != e.Personality {
				t.Fatalf("token of personality %q does not verify: %v", e.Personality, err)
			}
		}
	})
}
