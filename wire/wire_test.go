package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

func TestCodesAndAudiences(t *testing.T) {
	t.Parallel()
	for _, c := range []wire.Code{wire.CodeInputInvalid, wire.CodeNotAvailable, wire.CodeExecutionFailed, wire.CodeStaleWrite} {
		require.True(t, c.Valid(), c)
	}
	require.False(t, wire.Code("").Valid())
	require.False(t, wire.Code("INPUT_INVALID").Valid())
	for _, a := range []wire.Audience{wire.AudienceInternal, wire.AudienceUser, wire.AudienceDashboard} {
		require.True(t, a.Valid(), a)
	}
	require.False(t, wire.Audience("").Valid())
}

func TestResultJSONShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    wire.Result
		want string
	}{
		{"ok keeps an empty value and drops code and error", wire.Result{CallID: "c", BatchID: "c", Tool: "echo", OK: true, Code: wire.CodeInputInvalid, Error: "x"},
			`{"call_id":"c","batch_id":"c","tool":"echo","ok":true,"value":"","duration_ms":0}`},
		{"failure drops the value", wire.Result{CallID: "c", BatchID: "b", Tool: "echo", Value: "v", Code: wire.CodeNotAvailable, Error: "no"},
			`{"call_id":"c","batch_id":"b","tool":"echo","ok":false,"code":"not_available","error":"no","duration_ms":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := json.Marshal(tc.r)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(got))
		})
	}
}

func TestCallRequiredFieldsAndDefaults(t *testing.T) {
	t.Parallel()
	c := wire.Call{CallID: "c1", Tool: "echo", Args: json.RawMessage(`{}`), SessionID: "s"}
	got, err := json.Marshal(&c)
	require.NoError(t, err)
	require.JSONEq(t, `{"call_id":"c1","tool":"echo","args":{},"session_id":"s"}`, string(got))
	require.Equal(t, "c1", c.EffectiveBatchID())
	c.BatchID = "b1"
	require.Equal(t, "b1", c.EffectiveBatchID())
	// An empty, non-nil narrow_tools is kept: it allows no tool.
	c.NarrowTools = []string{}
	got, err = json.Marshal(&c)
	require.NoError(t, err)
	require.Contains(t, string(got), `"narrow_tools":[]`)
}

func TestTokens(t *testing.T) {
	t.Parallel()
	require.True(t, wire.ValidToken("call-1_A"))
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b"} {
		require.False(t, wire.ValidToken(bad), bad)
	}
	require.EqualError(t, wire.CheckToken("call_id", ""), "call_id must not be empty")
	require.EqualError(t, wire.CheckToken("call_id", "a.b"), `call_id "a.b" must match ^[A-Za-z0-9_-]{1,128}$`)
	ref := wire.BlobRef{Bucket: "capstan_blobs", NUID: "default.abc"}
	subj, err := ref.ChunkSubject()
	require.NoError(t, err)
	require.Equal(t, "$O.capstan_blobs.C.default.abc", subj)
}
