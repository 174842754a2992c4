package callexec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/stretchr/testify/require"
)

func TestFitText(t *testing.T) {
	t.Parallel()
	structured := func(n int) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"data": strings.Repeat("s", n)})
		return b
	}
	wrap := func(s string) string { return shape.WrapUntrusted(s, "cmd:x", "terminal") }
	tests := []struct {
		name           string
		res            protocol.Result
		text           string
		budget         int
		finish         func(string) string
		limit, maxStr  int
		wantOK         bool
		wantStructured bool
		wantOmitted    bool
		wantTruncated  bool
		wantText       string // "" = not checked
	}{
		{name: "fits as it is", res: protocol.Result{CallID: "c", OK: true}, text: "hello", limit: 1000, maxStr: 100,
			wantOK: true, wantText: "hello"},
		{name: "the budget trim still applies", res: protocol.Result{CallID: "c", OK: true}, text: "abcdef", budget: 3, limit: 1000, maxStr: 100,
			wantOK: true, wantTruncated: true, wantText: "abc\n[truncated — 6 chars total]"},
		{name: "NUL bytes take six bytes each: cut to fit", res: protocol.Result{CallID: "c", OK: true}, text: strings.Repeat("\x00", 10000),
			limit: 4096, maxStr: 100, wantOK: true, wantTruncated: true},
		{name: "structured over its cap is left out, the text kept", res: protocol.Result{CallID: "c", OK: true, Structured: structured(500)},
			text: "hello", limit: 10000, maxStr: 100, wantOK: true, wantOmitted: true, wantText: "hello"},
		{name: "structured over half the limit is left out", res: protocol.Result{CallID: "c", OK: true, Structured: structured(3000)},
			text: "hello", limit: 5000, maxStr: 1 << 20, wantOK: true, wantOmitted: true, wantText: "hello"},
		{name: "structured within both is kept, the text cut beside it", res: protocol.Result{CallID: "c", OK: true, Structured: structured(1000)},
			text: strings.Repeat("v", 10000), limit: 4096, maxStr: 2048, wantOK: true, wantStructured: true, wantTruncated: true},
		{name: "untrusted wrap stays whole", res: protocol.Result{CallID: "c", OK: true, Untrusted: true}, text: strings.Repeat("<s>", 5000),
			finish: wrap, limit: 4096, maxStr: 100, wantOK: true, wantTruncated: true},
		{name: "an error message is cut without the flag", res: protocol.Result{CallID: "c", Code: protocol.CodeExecutionFailed},
			text: strings.Repeat("e", 10000), limit: 2048, maxStr: 100, wantOK: true},
		{name: "nothing fits", res: protocol.Result{CallID: strings.Repeat("c", 128), OK: true}, text: "hello", limit: 60, maxStr: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := tt.res
			ok := fitText(&r, tt.text, tt.budget, tt.finish, tt.limit, tt.maxStr)
			require.Equal(t, tt.wantOK, ok)
			if !ok {
				return
			}
			require.LessOrEqual(t, encodedLen(&r), tt.limit)
			require.Equal(t, tt.wantStructured, r.Structured != nil)
			require.Equal(t, tt.wantOmitted, r.StructuredOmitted)
			require.Equal(t, tt.wantTruncated, r.Truncated)
			text := r.Value
			if !r.OK {
				text = r.Error
				require.Contains(t, text, "\n[truncated — 10000 chars total]")
			}
			if tt.wantText != "" {
				require.Equal(t, tt.wantText, text)
			}
			if tt.wantTruncated {
				require.Equal(t, len([]rune(tt.text)), r.OriginalChars)
				require.Contains(t, text, "chars total]")
			}
			if tt.finish != nil {
				require.True(t, strings.HasPrefix(text, `<untrusted source="cmd:x" tool="terminal">`), text[:60])
				require.True(t, strings.HasSuffix(text, "\n</untrusted>"))
			}
		})
	}
}

func TestCapReasonAndAudit(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b c", capReason("a\n b\tc"))
	long := capReason("a\n" + strings.Repeat("x", 5000))
	require.Equal(t, "a "+strings.Repeat("x", ReasonMaxChars-2)+" [truncated — 5002 chars total]", long, "one line")

	rec := protocol.AuditRecord{SessionID: strings.Repeat("s", 1000), Denials: make([]string, 100)}
	capAudit(&rec)
	require.Len(t, rec.Denials, 64)
	require.Equal(t, 36, rec.DenialsOmitted)
	require.True(t, strings.HasPrefix(rec.SessionID, strings.Repeat("s", 256)+"\n[truncated"))
}

// TestOversizedNamesTheLimit: the execution_failed result that replaces a
// result no message can carry names its size and the limit it broke, the
// server's max payload (read from the connection) or the worker's own
// CAPSTAN_RESULT_MAX_BYTES, and points at a blob already stored.
func TestOversizedNamesTheLimit(t *testing.T) {
	t.Parallel()
	s := &Services{bus: bustest.Conn(t, bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload)), "")}
	res := protocol.Result{CallID: "c1", BatchID: "b1", Tool: "run_process", OK: true, Value: "v", DurationMS: 7, WorkerID: "w1", Deliveries: 2}

	got := s.oversized(res, 6_700_000, s.limitText(bustest.StockMaxPayload))
	require.Equal(t, protocol.Result{CallID: "c1", BatchID: "b1", Tool: "run_process", Code: protocol.CodeExecutionFailed,
		Error:      "result of 6.7 MB exceeds the server's 1 MiB message limit; the output was dropped",
		DurationMS: 7, WorkerID: "w1", Deliveries: 2}, got)

	res.Blob = &protocol.BlobRef{Bucket: "capstan_blobs", Name: "default/c1"}
	got = s.oversized(res, 600_000, s.limitText(512<<10))
	require.Equal(t, "result of 600.0 kB exceeds the worker's 512 KiB result limit (CAPSTAN_RESULT_MAX_BYTES); the output was dropped"+
		" (the full output is in blob capstan_blobs/default/c1)", got.Error)
	require.Same(t, res.Blob, got.Blob)
}
