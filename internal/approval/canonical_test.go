package approval_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/stretchr/testify/require"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestArgsSHA256IsTheHashOfTheCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args, canonical string
	}{
		{"keys sorted, spaces dropped", `{ "url": "https://x.example/a", "method" : "POST" }`,
			`{"args":{"method":"POST","url":"https://x.example/a"},"personality_id":"ops","tool":"http_request"}`},
		{"numbers as sent", `{"n": 1.50, "m": 1e3, "k": -0}`,
			`{"args":{"k":-0,"m":1e3,"n":1.50},"personality_id":"ops","tool":"http_request"}`},
		{"nested objects and arrays sorted inside", `{"b":[{"z":1,"a":2},true,null],"a":{"y":"","x":false}}`,
			`{"args":{"a":{"x":false,"y":""},"b":[{"a":2,"z":1},true,null]},"personality_id":"ops","tool":"http_request"}`},
		{"strings: only what JSON must is escaped", `{"s":"<a&b> é 🚀 \u2028 \"q\" \\ \n\t\u0001"}`,
			"{\"args\":{\"s\":\"<a&b> é 🚀 \u2028 \\\"q\\\" \\\\ \\n\\t\\u0001\"},\"personality_id\":\"ops\",\"tool\":\"http_request\"}"},
		{"escapes of plain characters are decoded", `{"s":"\u0041\/"}`,
			`{"args":{"s":"A/"},"personality_id":"ops","tool":"http_request"}`},
		{"absent args are null", ``, `{"args":null,"personality_id":"ops","tool":"http_request"}`},
		{"keys sorted by bytes", `{"b":1,"B":2,"é":3,"a":4}`,
			`{"args":{"B":2,"a":4,"b":1,"é":3},"personality_id":"ops","tool":"http_request"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := approval.ArgsSHA256("ops", "http_request", json.RawMessage(tc.args))
			require.NoError(t, err)
			require.Equal(t, sha(tc.canonical), got)
		})
	}
}

func TestArgsSHA256BindsPersonalityToolAndEveryValue(t *testing.T) {
	t.Parallel()
	base, err := approval.ArgsSHA256("ops", "http_request", json.RawMessage(`{"method":"POST","amount":10}`))
	require.NoError(t, err)
	require.Len(t, base, 64)
	for name, f := range map[string]func() (string, error){
		"another personality": func() (string, error) {
			return approval.ArgsSHA256("ops2", "http_request", json.RawMessage(`{"method":"POST","amount":10}`))
		},
		"another tool": func() (string, error) {
			return approval.ArgsSHA256("ops", "fetch_url", json.RawMessage(`{"method":"POST","amount":10}`))
		},
		"another value": func() (string, error) {
			return approval.ArgsSHA256("ops", "http_request", json.RawMessage(`{"method":"POST","amount":11}`))
		},
		"the same number written otherwise": func() (string, error) {
			return approval.ArgsSHA256("ops", "http_request", json.RawMessage(`{"method":"POST","amount":10.0}`))
		},
		"an extra key": func() (string, error) {
			return approval.ArgsSHA256("ops", "http_request", json.RawMessage(`{"method":"POST","amount":10,"x":null}`))
		},
	} {
		got, err := f()
		require.NoError(t, err, name)
		require.NotEqual(t, base, got, name)
	}
	same, err := approval.ArgsSHA256("ops", "http_request", json.RawMessage("{\n  \"amount\": 10,\n  \"method\": \"POST\"\n}"))
	require.NoError(t, err)
	require.Equal(t, base, same, "white space and key order do not change the hash")
}

func TestArgsSHA256RefusesWhatIsNotJSON(t *testing.T) {
	t.Parallel()
	for _, args := range []string{`{`, `{"a":1} {"b":2}`, `nope`} {
		_, err := approval.ArgsSHA256("ops", "t", json.RawMessage(args))
		require.ErrorContains(t, err, "args: ", args)
	}
}

func FuzzCanonicalIsStable(f *testing.F) {
	f.Add(`{"a":[1,2,{"b":"c"}],"d":"\u00e9\n"}`)
	f.Add(`"\ud800"`)
	f.Add(`[1e400, -0.0, 123456789012345678901234567890]`)
	f.Fuzz(func(t *testing.T, args string) {
		h1, err := approval.ArgsSHA256("p", "t", json.RawMessage(args))
		if err != nil || strings.Trim(args, " \t\r\n") == "" {
			return
		}
		// The canonical form is JSON, and hashing it again as the args
		// gives the same hash: canonicalisation is idempotent.
		var v any
		dec := json.NewDecoder(stringsReader(args))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&v))
		c := approval.Canonical(v)
		require.True(t, json.Valid(c), "canonical form %q is not JSON", c)
		h2, err := approval.ArgsSHA256("p", "t", c)
		require.NoError(t, err)
		require.Equal(t, h1, h2)
	})
}
