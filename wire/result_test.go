package wire_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

// marshalResultStd is Result.MarshalJSON as it was written with
// encoding/json (shadow structs), kept as the reference the hand-written
// encoder must match byte for byte, errors included.
func marshalResultStd(r wire.Result) ([]byte, error) {
	type plain wire.Result
	type okShape struct {
		plain
		Code  wire.Code `json:"code,omitempty"`
		Error string    `json:"error,omitempty"`
	}
	type failShape struct {
		plain
		Value string `json:"value,omitempty"`
	}
	if r.OK {
		p := plain(r)
		p.Code, p.Error = "", ""
		return json.Marshal(okShape{plain: p})
	}
	return json.Marshal(failShape{plain: plain(r)})
}

// checkResult asserts that r.MarshalJSON writes what the reference writes,
// or fails with the same message, and that json.Marshal(r) (which passes
// MarshalJSON's bytes through its validation and compaction) leaves them
// as they are.
func checkResult(t *testing.T, r wire.Result) {
	t.Helper()
	want, wantErr := marshalResultStd(r)
	got, err := r.MarshalJSON()
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error())
		require.Nil(t, got)
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	viaMarshal, err := json.Marshal(r)
	require.NoError(t, err)
	require.Equal(t, string(want), string(viaMarshal))
}

func float(f float64) *float64 { return &f }

func TestResultMarshalMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	nasty := "<b>\"q\"</b> & \\ \u2028\u2029 \b\f\n\r\t \x00\x01\x1f\x7f é 🚀 \xff \xe2\x80 \xed\xa0\x80 \xc0\xaf"
	blob := &wire.BlobRef{Bucket: "p_blobs", Name: "echo/c-1", NUID: "echo.abc", Size: 1 << 40, SHA256: "ab12",
		ContentType: wire.BlobTypeText, Part: wire.BlobPartValue}
	all := wire.Result{CallID: "c", BatchID: "b", Tool: "echo", Value: "v", Structured: json.RawMessage(`{"a":1}`),
		CostUSD: float(0.25), Code: wire.CodeExecutionFailed, Error: "e", RetryAfterMS: 1500, Truncated: true, OriginalChars: 9,
		Untrusted: true, DurationMS: 3, WorkerID: "w", Deliveries: 2, StructuredOmitted: true, Blob: blob}
	with := func(r wire.Result, f func(*wire.Result)) wire.Result { f(&r); return r }
	for _, tc := range []struct {
		name string
		r    wire.Result
	}{
		{"zero failure", wire.Result{}},
		{"zero ok: empty value present", wire.Result{OK: true}},
		{"ok drops code and error", wire.Result{OK: true, Value: "v", Code: wire.CodeInputInvalid, Error: "e"}},
		{"failure drops the value", wire.Result{Value: "v", Code: wire.CodeNotAvailable, Error: "e"}},
		{"failure with code only", wire.Result{Code: wire.CodeStaleWrite}},
		{"failure with error only", wire.Result{Error: "e"}},
		{"every field, ok", with(all, func(r *wire.Result) { r.OK = true })},
		{"every field, failure", all},
		{"nasty strings everywhere, ok", wire.Result{CallID: nasty, BatchID: nasty, Tool: nasty, OK: true, Value: nasty,
			WorkerID: nasty, Blob: &wire.BlobRef{Bucket: nasty, Name: nasty, NUID: nasty, SHA256: nasty, ContentType: nasty, Part: nasty}}},
		{"nasty strings everywhere, failure", wire.Result{CallID: nasty, BatchID: nasty, Tool: nasty, Code: wire.Code(nasty), Error: nasty, WorkerID: nasty}},
		{"negative numbers", wire.Result{RetryAfterMS: -1, OriginalChars: -2, DurationMS: math.MinInt64, Deliveries: math.MinInt}},
		{"largest numbers", wire.Result{OK: true, RetryAfterMS: math.MaxInt64, OriginalChars: math.MaxInt, DurationMS: math.MaxInt64, Deliveries: math.MaxInt}},
		{"empty blob", wire.Result{Blob: &wire.BlobRef{}}},
		{"structured compacted and html-escaped", wire.Result{OK: true, Structured: json.RawMessage(" {\n \"<a>\" : [ 1 , \"&\u2028\u2029\" ] } \n")}},
		{"structured with invalid UTF-8 kept", wire.Result{OK: true, Structured: json.RawMessage("[\"\xff\"]")}},
		{"structured empty but not nil is left out", wire.Result{OK: true, Structured: json.RawMessage{}}},
		{"structured null", wire.Result{Structured: json.RawMessage(`null`)}},
		{"structured invalid", wire.Result{OK: true, Structured: json.RawMessage(`{"a":`)}},
		{"structured trailing garbage", wire.Result{Structured: json.RawMessage(`{} x`)}},
		{"structured only whitespace", wire.Result{Structured: json.RawMessage(" ")}},
		{"structured too deep", wire.Result{Structured: json.RawMessage(strings.Repeat("[", 10001) + strings.Repeat("]", 10001))}},
		{"cost zero", wire.Result{CostUSD: float(0)}},
		{"cost negative zero", wire.Result{CostUSD: float(math.Copysign(0, -1))}},
		{"cost small", wire.Result{CostUSD: float(1e-7)}},
		{"cost at the exponent threshold", wire.Result{CostUSD: float(1e-6)}},
		{"cost large", wire.Result{CostUSD: float(1e21)}},
		{"cost below the large threshold", wire.Result{CostUSD: float(1e20)}},
		{"cost largest", wire.Result{CostUSD: float(math.MaxFloat64)}},
		{"cost smallest", wire.Result{CostUSD: float(math.SmallestNonzeroFloat64)}},
		{"cost NaN", wire.Result{OK: true, CostUSD: float(math.NaN())}},
		{"cost +Inf", wire.Result{CostUSD: float(math.Inf(1))}},
		{"cost -Inf", wire.Result{CostUSD: float(math.Inf(-1))}},
		{"structured error comes before the cost's", wire.Result{Structured: json.RawMessage(`x`), CostUSD: float(math.NaN())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkResult(t, tc.r)
		})
	}
}

func FuzzResultMarshalMatchesEncodingJSON(f *testing.F) {
	f.Add("c-1", "b-1", "echo", true, "hello <world> & \u2028", []byte(` {"a" : [1, "<&>"]} `), true, 0.25, true,
		"", "", int64(0), false, 0, false, int64(3), "w-1", 1, false, "p_blobs", int64(10), false)
	f.Add("c\x00", "b\xff", "t\u2029", false, "v", []byte(`{} x`), true, math.NaN(), true,
		"execution_failed", "boom\n", int64(1500), true, 12, true, int64(-1), "", 0, true, "n\"", int64(-5), true)
	f.Add("", "", "", true, "", []byte(nil), false, math.Inf(1), true,
		"input_invalid", "e", int64(0), false, 0, false, int64(0), "", 0, false, "", int64(0), true)
	f.Add("x", "y", "z", false, "", []byte("[\"\xff\xe2\x80\xa8\"]"), true, 1e-7, true,
		"", "", int64(0), false, 0, false, int64(0), "w", 0, false, "", int64(0), false)
	f.Fuzz(func(t *testing.T, callID, batchID, tool string, ok bool, value string, structured []byte, hasStructured bool,
		cost float64, hasCost bool, code, errMsg string, retryAfter int64, truncated bool, original int, untrusted bool,
		duration int64, workerID string, deliveries int, omitted bool, blobName string, blobSize int64, hasBlob bool) {
		r := wire.Result{CallID: callID, BatchID: batchID, Tool: tool, OK: ok, Value: value, Code: wire.Code(code), Error: errMsg,
			RetryAfterMS: retryAfter, Truncated: truncated, OriginalChars: original, Untrusted: untrusted, DurationMS: duration,
			WorkerID: workerID, Deliveries: deliveries, StructuredOmitted: omitted}
		if hasStructured {
			r.Structured = structured
		}
		if hasCost {
			r.CostUSD = &cost
		}
		if hasBlob {
			r.Blob = &wire.BlobRef{Bucket: callID, Name: blobName, NUID: batchID, Size: blobSize, SHA256: tool,
				ContentType: errMsg, Part: code}
		}
		checkResult(t, r)
	})
}

// benchEchoResult is the result of an echo call as the benchmark makes
// them: about 1 KiB of ASCII text, ids of 20 characters.
func benchEchoResult() wire.Result {
	return wire.Result{CallID: "01JD8X3K4M5N6P7Q8R9S", BatchID: "01JD8X3K4M5N6P7Q8R9T", Tool: "echo", OK: true,
		Value:      strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1024],
		DurationMS: 3, WorkerID: "worker-7f9c2d-host-12", Deliveries: 1}
}

// BenchmarkResultMarshalJSON compares MarshalJSON with the encoding/json
// shadow structs it replaced, on an echo result.
func BenchmarkResultMarshalJSON(b *testing.B) {
	r := benchEchoResult()
	for _, bc := range []struct {
		name    string
		marshal func(wire.Result) ([]byte, error)
	}{{"encoding-json", marshalResultStd}, {"appender", wire.Result.MarshalJSON}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.marshal(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
