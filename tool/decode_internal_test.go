package tool

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// decodeArgs reads arguments with the v1 API of go-json-experiment (one
// pass over the bytes instead of encoding/json's two). It must accept,
// refuse and fill exactly as encoding/json does (decodeArgsStd), with the
// same messages.

type decodeProbe struct {
	Text     string            `json:"text"`
	N        int               `json:"n"`
	U        uint8             `json:"u"`
	F        *float64          `json:"f"`
	B        bool              `json:"b"`
	List     []string          `json:"list"`
	Map      map[string]int    `json:"map"`
	Inner    *struct{ X int }  `json:"inner"`
	Raw      json.RawMessage   `json:"raw"`
	Any      any               `json:"any"`
	Headers  map[string]string `json:"headers,omitempty"`
	Ignored  string            `json:"-"`
	Fallback string
}

var decodeArgsSeeds = []string{
	`{"text":"hi","n":3,"u":255,"f":1.5,"b":true,"list":["a"],"map":{"a":1},"inner":{"X":2},"raw":{"k":[1]},"any":[1,"x",null]}`,
	`{"TEXT":"case folds","fallback":"x","FALLBACK":"y"}`,
	`{"n":"3"}`,
	`{"n":1.5}`,
	`{"u":256}`,
	`{"u":-1}`,
	`{"list":"a"}`,
	`{"map":{"a":"b"}}`,
	`{"inner":{"X":"y"}}`,
	`{"b":"true"}`,
	`{"text":1}`,
	`[1]`,
	`"s"`,
	`null`,
	`{"text":"a","text":"b"}`,
	"{\"text\":\"\xff\"}",
	`{"unknown":1,"-":"x"}`,
	`{"a":`,
	`{} x`,
	`{"n":1e400}`,
}

func TestDecodeArgsMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range decodeArgsSeeds {
		checkDecodeArgs(t, []byte(s))
	}
}

func FuzzDecodeArgsMatchesEncodingJSON(f *testing.F) {
	for _, s := range decodeArgsSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeArgs(t, data) })
}

func checkDecodeArgs(t *testing.T, data []byte) {
	t.Helper()
	var got, want decodeProbe
	msg, ok := decodeArgs(data, &got)
	wantMsg, wantOK := decodeArgsStd(data, &want)
	if ok != wantOK {
		t.Fatalf("%q: ok=%v (%s), encoding/json ok=%v (%s)", data, ok, msg, wantOK, wantMsg)
	}
	if ok && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
	}
	// A syntax error's wording may differ after its prefix; a type
	// error names the same kind, and the same field or a member of it
	// (args.map.a where encoding/json said args.map), spelt as the input
	// spells it (case folds).
	isType := strings.HasPrefix(wantMsg, "args.") || strings.HasPrefix(wantMsg, "args must be an object, got")
	_, wantKind, _ := strings.Cut(wantMsg, " must be ")
	_, kind, _ := strings.Cut(msg, " must be ")
	if !ok && isType && (kind != wantKind || !strings.HasPrefix(strings.ToLower(msg), strings.ToLower(strings.SplitN(wantMsg, " ", 2)[0]))) {
		t.Fatalf("%q: message %q, encoding/json %q", data, msg, wantMsg)
	}
}

// BenchmarkDecodeArgs compares decodeArgs with encoding/json (what it used
// before) on echo's 1 KiB arguments, in one run.
func BenchmarkDecodeArgs(b *testing.B) {
	raw := []byte(`{"text":"` + strings.Repeat("Capstan runs LLM-agent tool calls at scale. ", 24)[:1013] + `"}`)
	type echoArgs struct {
		Text    string `json:"text"`
		SleepMS int64  `json:"sleep_ms"`
	}
	for _, bc := range []struct {
		name   string
		decode func(json.RawMessage, any) (string, bool)
	}{{"encoding-json", decodeArgsStd}, {"decodeArgs", decodeArgs}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				var a echoArgs
				if _, ok := bc.decode(raw, &a); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}

// encoding/json.Number is the one type the v1 API decodes differently (it
// has its own Number): Typed decodes argument types that hold one with
// encoding/json.
func TestHoldsNumber(t *testing.T) {
	t.Parallel()
	type list struct {
		Next *list
		N    int
	}
	type withNumber struct {
		Deep map[string][]*struct{ N json.Number }
	}
	for _, tc := range []struct {
		typ  reflect.Type
		want bool
	}{
		{reflect.TypeFor[decodeProbe](), false},
		{reflect.TypeFor[list](), false},
		{reflect.TypeFor[json.Number](), true},
		{reflect.TypeFor[withNumber](), true},
		{reflect.TypeFor[map[json.Number]int](), true},
		{reflect.TypeFor[[2]*json.Number](), true},
	} {
		require.Equal(t, tc.want, holdsNumber(tc.typ), "holdsNumber(%v)", tc.typ)
	}
}

func TestTypedDecodesJSONNumber(t *testing.T) {
	t.Parallel()
	type args struct {
		N json.Number `json:"n"`
		S json.Number `json:"s"`
	}
	var got args
	exec := Typed(func(_ context.Context, a args, _ *Context) (Result, error) {
		got = a
		return OK(""), nil
	})
	res, err := exec(context.Background(), json.RawMessage(`{"n":12.50,"s":"7"}`), nil)
	require.NoError(t, err)
	require.True(t, res.OK, "refused: %+v", res)
	require.Equal(t, args{N: "12.50", S: "7"}, got)
	res, _ = exec(context.Background(), json.RawMessage(`{"n":"x"}`), nil)
	require.False(t, res.OK, "a string that is no number was accepted")
	require.Contains(t, res.Error, "invalid arguments: ")
}
