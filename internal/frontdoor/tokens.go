package frontdoor

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"sigs.k8s.io/yaml"

	"github.com/capstanhq/capstan/internal/protocol"
)

// MinTokenLength is the shortest bearer token a tokens file may hold.
const MinTokenLength = 16

// Keys of auth.TokenInfo.Extra set by the verifier.
const (
	extraPersonality = "personality"
	extraName        = "name"
)

// TokenEntry is one entry of a tokens file.
type TokenEntry struct {
	// Token is the bearer token, at least MinTokenLength characters, no
	// spaces or control characters, unique in the file.
	Token string `json:"token"`
	// Personality is the personality the token's sessions are bound to.
	Personality string `json:"personality"`
	// Name labels the token in logs and in the calls' session_key and
	// agent_id; default "tokens[<index>]".
	Name string `json:"name"`
}

// tokensFile is the YAML document of a tokens file.
type tokensFile struct {
	Tokens []TokenEntry `json:"tokens"`
}

// Tokens maps bearer tokens to personalities. Only SHA-256 hashes of the
// tokens are kept, and a token is looked up by comparing its hash with every
// entry in constant time.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	hash        [sha256.Size]byte
	personality string
	name        string
	userID      string
}

// TokensError lists every problem of a tokens file.
type TokensError struct {
	File     string
	Problems []string
}

// Error returns "tokens file <file>: <problem>; <problem>...".
func (e *TokensError) Error() string {
	return "tokens file " + e.File + ": " + strings.Join(e.Problems, "; ")
}

// LoadTokens reads a tokens file: YAML `{tokens: [{token, personality,
// name}]}`, decoded strictly (an unknown or repeated key is an error). Every
// problem is reported at once in a *TokensError naming the file; token
// values never appear in errors.
func LoadTokens(path string) (*Tokens, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &TokensError{File: path, Problems: []string{err.Error()}}
	}
	t, problems := ParseTokens(data)
	if len(problems) > 0 {
		return nil, &TokensError{File: path, Problems: problems}
	}
	return t, nil
}

// ParseTokens parses the contents of a tokens file and returns every
// problem (nil Tokens when there is any).
func ParseTokens(data []byte) (*Tokens, []string) {
	var doc tokensFile
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, []string{strings.Join(strings.Fields(err.Error()), " ")} // one line
	}
	if len(doc.Tokens) == 0 {
		return nil, []string{"tokens: no tokens; a front door without tokens would refuse every request"}
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	t := &Tokens{}
	seen := make(map[[sha256.Size]byte]string)
	for i, e := range doc.Tokens {
		at := fmt.Sprintf("tokens[%d]", i)
		name := e.Name
		if name == "" {
			name = at
		}
		switch {
		case e.Token == "":
			bad("%s.token: must not be empty", at)
		case strings.IndexFunc(e.Token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			bad("%s.token: must not contain spaces or control characters", at)
		case len(e.Token) < MinTokenLength:
			bad("%s.token: too short (%d characters); use at least %d random characters, e.g. the output of `openssl rand -hex 32`",
				at, len(e.Token), MinTokenLength)
		}
		if err := protocol.CheckToken(at+".personality", e.Personality); err != nil {
			bad("%v", err)
		}
		if strings.IndexFunc(e.Name, unicode.IsControl) >= 0 {
			bad("%s.name: must not contain control characters", at)
		}
		h := sha256.Sum256([]byte(e.Token))
		if first, dup := seen[h]; dup && e.Token != "" {
			bad("%s.token: the same token as %s; every token must be unique", at, first)
			continue
		}
		seen[h] = at
		t.entries = append(t.entries, tokenEntry{hash: h, personality: e.Personality, name: name, userID: at})
	}
	if len(problems) > 0 {
		return nil, problems
	}
	return t, nil
}

// Personalities returns the distinct personalities of the tokens, sorted.
func (t *Tokens) Personalities() []string {
	var out []string
	for _, e := range t.entries {
		if !slices.Contains(out, e.personality) {
			out = append(out, e.personality)
		}
	}
	slices.Sort(out)
	return out
}

// verify is the auth.TokenVerifier of Handler: a known token yields its
// personality and name; UserID identifies the entry, so the SDK refuses a
// session's requests made with another token.
func (t *Tokens) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	h := sha256.Sum256([]byte(token))
	match := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return nil, auth.ErrInvalidToken
	}
	e := t.entries[match]
	return &auth.TokenInfo{UserID: e.userID, Extra: map[string]any{extraPersonality: e.personality, extraName: e.name}}, nil
}

// tokenPersonality is the personality of a verified token ("" for none).
func tokenPersonality(ti *auth.TokenInfo) string {
	if ti == nil {
		return ""
	}
	p, _ := ti.Extra[extraPersonality].(string)
	return p
}

// tokenUser is the user of a verified token: its entry ("" for none).
func tokenUser(ti *auth.TokenInfo) string {
	if ti == nil {
		return ""
	}
	return ti.UserID
}
