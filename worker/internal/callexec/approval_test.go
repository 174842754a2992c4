package callexec

import (
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/shape"
	"github.com/stretchr/testify/require"
)

// TestSummaryArgsRedactsTheWorkersSecrets: the arguments an approval
// summary shows never hold a secret value the worker knows (its NATS
// credentials), and stay JSON.
func TestSummaryArgsRedactsTheWorkersSecrets(t *testing.T) {
	t.Parallel()
	const seed = "SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY"
	creds := shape.NewRedactor([]string{seed})
	for _, tc := range []struct {
		name, args string
	}{
		{"a value", `{"text":"` + seed + `"}`},
		{"inside a longer string", `{"url":"https://x.example/?k=` + seed + `&n=1"}`},
		{"in a key", `{"` + seed + `":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := summaryArgs(creds, json.RawMessage(tc.args))
			require.NotContains(t, string(got), seed)
			require.True(t, json.Valid(got), "%s", got)
		})
	}
	require.JSONEq(t, `{"text":"hello"}`, string(summaryArgs(creds, json.RawMessage(`{"text":"hello"}`))), "nothing to redact: as sent")
	require.Equal(t, "null", string(summaryArgs(creds, nil)))
	require.Equal(t, `{"a":1}`, string(summaryArgs(nil, json.RawMessage(`{"a":1}`))), "no credentials to redact")
}
