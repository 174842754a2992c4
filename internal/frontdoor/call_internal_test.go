package frontdoor

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// TestToolResultSaysWhatTheMessageLeftOut: the text given to the model
// names the blob of a cut output and says when structured content was left
// out, as client/envelope renders results; structuredContent is set only
// for a payload the message carries.
func TestToolResultSaysWhatTheMessageLeftOut(t *testing.T) {
	t.Parallel()
	ref := func(part string, size int64) *client.BlobRef {
		return &client.BlobRef{Bucket: "capstan_blobs", Name: "alpha/c1", NUID: "alpha.X", Size: size,
			SHA256: strings.Repeat("0", 64), ContentType: protocol.BlobTypeText, Part: part}
	}
	for _, c := range []struct {
		name       string
		r          client.Result
		text       string
		structured bool
	}{
		{"carried whole", client.Result{CallID: "c1", OK: true, Value: "v", Structured: json.RawMessage(`{"a":1}`)}, "v", true},
		{"a cut value and its blob", client.Result{CallID: "c1", OK: true, Value: "v\n[truncated — 90000 chars total]", Truncated: true,
			OriginalChars: 90000, Blob: ref(protocol.BlobPartValue, 90000)},
			"v\n[truncated — 90000 chars total]\n[full output (90000 bytes) stored as blob capstan_blobs/alpha/c1]", false},
		{"structured left out, in its blob", client.Result{CallID: "c1", OK: true, Value: "v", StructuredOmitted: true,
			Blob: ref(protocol.BlobPartStructured, 300000)},
			"v\n[structured content (300000 bytes) left out; stored as blob capstan_blobs/alpha/c1]", false},
		{"structured left out, no blob", client.Result{CallID: "c1", OK: true, Value: "v", StructuredOmitted: true},
			"v\n[structured content left out: too large for the result message]", false},
		{"a failure and the blob of its message", client.Result{CallID: "c1", Code: protocol.CodeExecutionFailed, Error: "boom",
			Blob: ref(protocol.BlobPartError, 70000)},
			"execution_failed: boom\n[full error message (70000 bytes) stored as blob capstan_blobs/alpha/c1]", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			out := toolResult(c.r)
			require.Len(t, out.Content, 1)
			tc, ok := out.Content[0].(*mcp.TextContent)
			require.True(t, ok)
			require.Equal(t, c.text, tc.Text)
			require.Equal(t, c.structured, out.StructuredContent != nil)
			require.Equal(t, !c.r.OK, out.IsError)
			require.Equal(t, "c1", out.Meta[MetaCallID])
		})
	}
}
