package argschema

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// decode must read exactly what jsonschema.UnmarshalJSON reads: the same
// values for the documents it accepts, and an error for the others.
var decodeSeeds = []string{
	`{"text":"hi","n":12345678901234567890,"f":-1.5e3,"a":[true,false,null,{"x":[]}]}`,
	`{"a":1,"a":2}`,
	"{\"s\":\"\xff\xfe ok \xc3\"}",
	`{"esc":"\u00e9\n\ud83d\ude00\"\\"}`,
	` {"x":1} `,
	`{"x":1} {"y":2}`,
	`{"x":1}]`,
	`[1,2,]`,
	`{"a":}`,
	`"text"`,
	`01`,
	`{"x":1e400}`,
	``,
	`{"\ud800":1}`,
}

func TestDecodeMatchesUnmarshalJSON(t *testing.T) {
	t.Parallel()
	for _, s := range decodeSeeds {
		checkDecodeMatches(t, []byte(s))
	}
}

func FuzzDecodeMatchesUnmarshalJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeMatches(t, data) })
}

func checkDecodeMatches(t *testing.T, data []byte) {
	t.Helper()
	want, wantErr := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	got, err := decode(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%q: decode error %v, UnmarshalJSON error %v", data, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decode gave %#v, UnmarshalJSON %#v", data, got, want)
	}
}

// BenchmarkDecodeArgs compares decode with jsonschema.UnmarshalJSON (what
// Validate used before) on echo's 1 KiB arguments, in one run.
func BenchmarkDecodeArgs(b *testing.B) {
	args := []byte(`{"text":"` + strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013] + `"}`)
	b.Run("UnmarshalJSON", func(b *testing.B) {
		b.SetBytes(int64(len(args)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonschema.UnmarshalJSON(bytes.NewReader(args)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(args)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
