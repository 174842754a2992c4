package jsonenc_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/jsonenc"
	"github.com/stretchr/testify/require"
)

// Each appender is compared with json.Marshal of the same value: the same
// bytes, or an error with the same message (and nothing appended).

// prefix is what the appenders are given to append to: they must keep it.
const prefix = "x:"

func checkString(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	require.NoError(t, err)
	require.Equal(t, prefix+string(want), string(jsonenc.AppendString([]byte(prefix), s)), "%q", s)
}

func checkFloat(t *testing.T, f float64) {
	t.Helper()
	want, wantErr := json.Marshal(f)
	got, err := jsonenc.AppendFloat64([]byte(prefix), f)
	checkSame(t, want, wantErr, got, err)
}

func checkTime(t *testing.T, tm time.Time) {
	t.Helper()
	want, wantErr := json.Marshal(tm)
	got, err := jsonenc.AppendTime([]byte(prefix), tm)
	checkSame(t, want, wantErr, got, err)
}

func checkRaw(t *testing.T, raw []byte) {
	t.Helper()
	want, wantErr := json.Marshal(json.RawMessage(raw))
	got, err := jsonenc.AppendRawMessage([]byte(prefix), raw)
	checkSame(t, want, wantErr, got, err)
}

// checkSame asserts that an appender's output (after prefix) is
// json.Marshal's, or that both failed with the same message, the appender
// leaving the prefix as it was.
func checkSame(t *testing.T, want []byte, wantErr error, got []byte, err error) {
	t.Helper()
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error())
		require.Equal(t, prefix, string(got))
		return
	}
	require.NoError(t, err)
	require.Equal(t, prefix+string(want), string(got))
}

// TestAppendStringEveryByte puts every byte alone and at every place of
// strings long enough for the eight-byte loop, between plain bytes.
func TestAppendStringEveryByte(t *testing.T) {
	t.Parallel()
	for b := range 256 {
		checkString(t, string([]byte{byte(b)}))
		for i := range 17 {
			s := []byte(strings.Repeat("a", 17))
			s[i] = byte(b)
			checkString(t, string(s))
		}
	}
}

func TestAppendString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, s string }{
		{"empty", ""},
		{"ascii", "Capstan runs LLM-agent tool calls at scale."},
		{"html", `<script>alert("x") && 1 > 0</script>`},
		{"quote and backslash", `"\"\\`},
		{"named control escapes", "\b\f\n\r\t"},
		{"other control bytes", "\x00\x01\x0b\x0e\x1f"},
		{"del is kept", "\x7f"},
		{"line and paragraph separators", "a\u2028b\u2029c"},
		{"other three-byte runes near them", "\u2027\u202a\u2020"},
		{"multi-byte runes", "héllo, 世界, 🚀"},
		{"lone continuation byte", "a\x80b"},
		{"truncated sequence", "\xe2\x80"},
		{"truncated at the end", "abc\xf0\x9f\x9a"},
		{"overlong encoding", "\xc0\xaf"},
		{"surrogate half", "\xed\xa0\x80"},
		{"beyond U+10FFFF", "\xf4\x90\x80\x80"},
		{"invalid bytes", "\xff\xfe"},
		{"replacement rune itself", "\ufffd"},
		{"everything", "<a href=\"x\">\u2028&\x00\xff\n</a>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkString(t, tc.s)
		})
	}
}

func TestAppendFloat64(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{
		0, math.Copysign(0, -1), 1, -1, 0.1, 0.25, 123.456, 1e20, 1e21, -1e21, 123456789e13,
		1e-6, 1e-7, -1e-7, 9.999999e-7, 5e-324, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64,
		1e100, 1e-100, 3.0e-9, 1 << 53, 1<<53 + 1, 0.1 + 0.2,
		math.NaN(), math.Inf(1), math.Inf(-1),
	} {
		checkFloat(t, f)
	}
}

func TestAppendTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		t    time.Time
	}{
		{"zero", time.Time{}},
		{"utc without fraction", time.Date(2026, 11, 22, 13, 56, 38, 0, time.UTC)},
		{"nanoseconds", time.Date(2026, 11, 22, 13, 56, 38, 123456789, time.UTC)},
		{"trailing zeros of the fraction dropped", time.Date(2026, 11, 22, 13, 56, 38, 120000000, time.UTC)},
		{"local time", time.Date(2026, 1, 2, 3, 4, 5, 6, time.Local)},
		{"positive offset", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 5*3600+30*60))},
		{"negative offset", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Y", -8*3600))},
		{"offset of seconds only", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("S", 59))},
		{"offset of 23:59", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Z", 24*3600-60))},
		{"offset of 24 hours", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Z", 24*3600))},
		{"offset of -24 hours", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Z", -24*3600))},
		{"offset of 100 hours", time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("Z", 100*3600))},
		{"year 0", time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"year 9999", time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		{"year 10000", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"year -1", time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"year 10000 by its zone", time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC).In(time.FixedZone("E", 2*3600))},
		{"year 10000 with a bad offset", time.Date(10000, 1, 1, 0, 0, 0, 0, time.FixedZone("Z", 30*3600))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkTime(t, tc.t)
		})
	}
}

func TestAppendRawMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, raw string }{
		{"object", `{"a":1}`},
		{"whitespace between tokens", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\" : { } } \n"},
		{"whitespace in strings kept", `{"a b":" c\td "}`},
		{"html in strings", `{"<a>":"x & y > z"}`},
		{"separators in strings", "[\"\u2028\u2029\"]"},
		{"escapes kept", `["\"\\\/\b\f\n\r\t\u0041\u003c"]`},
		{"escaped quote then whitespace", `["\\" , "\"" ]`},
		{"invalid UTF-8 in a string kept", "[\"\xff\xe2\x80\"]"},
		{"a separator after an invalid byte", "[\"\xf0\xe2\x80\xa8\"]"},
		{"scalars", ` 12.5e3 `},
		{"null", `null`},
		{"true", `true`},
		{"a string", `"s"`},
		{"nil", ""},
		{"empty", "\x00"[:0]},
		{"only whitespace", "  "},
		{"trailing garbage", `{} x`},
		{"two values", `1 2`},
		{"unterminated", `{"a":`},
		{"bare word", `nope`},
		{"control byte in a string", "[\"\x01\"]"},
		{"html outside a string", `<a>`},
		{"separator outside a string", "[\u2028]"},
		{"deep nesting", strings.Repeat("[", 10000) + strings.Repeat("]", 10000)},
		{"too deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var raw []byte
			if tc.name != "nil" {
				raw = []byte(tc.raw)
			}
			checkRaw(t, raw)
		})
	}
}

func TestAppendBool(t *testing.T) {
	t.Parallel()
	require.Equal(t, "true", string(jsonenc.AppendBool(nil, true)))
	require.Equal(t, "false", string(jsonenc.AppendBool(nil, false)))
}

// FuzzAppendMatchesEncodingJSON compares every appender with json.Marshal.
func FuzzAppendMatchesEncodingJSON(f *testing.F) {
	f.Add("<a>\u2028\xff\n", []byte(` {"a" : ["<&>\u2029"] } `), 1e-7, int64(1e9), int64(5), 3600, false)
	f.Add("", []byte(`{} x`), math.NaN(), int64(253402300800), int64(0), 0, true)
	f.Add("\x00", []byte(nil), math.Inf(-1), int64(-62135596801), int64(-1), 86400, false)
	f.Add("é", []byte("[\"\xff\"]"), 1e21, int64(0), int64(999999999), -86399, false)
	f.Fuzz(func(t *testing.T, s string, raw []byte, fl float64, sec, nsec int64, offset int, utc bool) {
		checkString(t, s)
		checkRaw(t, raw)
		checkFloat(t, fl)
		tm := time.Unix(sec, nsec)
		if utc {
			tm = tm.UTC()
		} else {
			tm = tm.In(time.FixedZone(s, offset))
		}
		checkTime(t, tm)
	})
}

// BenchmarkAppendString appends 1 KiB of ASCII text, a tool's output.
func BenchmarkAppendString(b *testing.B) {
	s := strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1024]
	dst := make([]byte, 0, 2048)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		dst = jsonenc.AppendString(dst[:0], s)
	}
}
