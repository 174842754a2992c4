package shape

import (
	"html"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnescapeAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string // want "" for no escape at 0
		end            int
	}{
		{"percent upper", "%2B!", "+", 3},
		{"percent lower", "%2b!", "+", 3},
		{"percent byte", "%ff", "\xff", 3},
		{"percent one digit", "%2", "", -1},
		{"percent not hex", "%2G", "", -1},
		{"percent alone", "%", "", -1},
		{"json quote", `\"x`, `"`, 2},
		{"json backslash", `\\u0041`, `\`, 2},
		{"json slash", `\/`, "/", 2},
		{"json short escapes", `\n`, "\n", 2},
		{"json tab", `\t`, "\t", 2},
		{"json backspace", `\b`, "\b", 2},
		{"json form feed", `\f`, "\f", 2},
		{"json carriage return", `\r`, "\r", 2},
		{"json u lower", `\u002b`, "+", 6},
		{"json u upper", `\u002B`, "+", 6},
		{"json u non-ASCII", `\u00E9`, "é", 6},
		{"json surrogate pair", `\uD83D\uDE00x`, "😀", 12},
		{"json surrogate pair lower", `\ud83d\ude00`, "😀", 12},
		{"json lone high surrogate", `\uD83Dx`, "", -1},
		{"json high surrogate then BMP", `\uD83D\u0041`, "", -1},
		{"json lone low surrogate", `\uDE00`, "", -1},
		{"json short u", `\u12`, "", -1},
		{"json not hex", `\u12G4`, "", -1},
		{"json unknown escape", `\x41`, "", -1},
		{"json U upper is no escape", `\U0041`, "", -1},
		{"json alone", `\`, "", -1},
		{"html decimal", "&#43;", "+", 5},
		{"html decimal leading zeros", "&#0043;", "+", 7},
		{"html hex", "&#x2B;", "+", 6},
		{"html hex upper X", "&#X2b;", "+", 6},
		{"html non-BMP", "&#x1F600;", "😀", 9},
		{"html decimal non-BMP", "&#128512;", "😀", 9},
		{"html code point not Windows-1252", "&#128;", "\u0080", 6},
		{"html named", "&plus;", "+", 6},
		{"html named amp", "&amp;", "&", 5},
		{"html named lt", "&lt;", "<", 4},
		{"html named gt", "&gt;", ">", 4},
		{"html named quot", "&quot;", `"`, 6},
		{"html named apos", "&apos;", "'", 6},
		{"html named sol", "&sol;", "/", 5},
		{"html named num", "&num;", "#", 5},
		{"html named semi", "&semi;", ";", 6},
		{"html named two code points", "&nvlt;", "<\u20d2", 6},
		{"html named non-ASCII", "&eacute;", "é", 8},
		{"html without semicolon", "&amp x", "", -1},
		{"html decimal without semicolon", "&#43 x", "", -1},
		{"html unknown name", "&nosuch;", "", -1},
		{"html legacy prefix only", "&ampx;", "", -1},
		{"html name with digit first", "&1amp;", "", -1},
		{"html empty", "&;", "", -1},
		{"html empty number", "&#;", "", -1},
		{"html empty hex", "&#x;", "", -1},
		{"html surrogate", "&#xD800;", "", -1},
		{"html beyond Unicode", "&#x110000;", "", -1},
		{"html overflow", "&#xFFFFFFFFFF;", "", -1},
		{"html alone", "&", "", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, end := unescapeAt([]byte("x"), tt.in, 0, schemeAll)
			require.Equal(t, tt.end, end)
			require.Equal(t, "x"+tt.want, string(got))
		})
	}
}

// An escape of a scheme not asked for is none.
func TestUnescapeStringSchemes(t *testing.T) {
	t.Parallel()
	const in = `a%41\u0042&#67;%2541`
	require.Equal(t, "aABC%41", unescapeString(in, schemeAll))
	require.Equal(t, `aA\u0042&#67;%41`, unescapeString(in, schemePercent))
	require.Equal(t, `a%41B&#67;%2541`, unescapeString(in, schemeJSON))
	require.Equal(t, `a%41\u0042C%2541`, unescapeString(in, schemeHTML))
	require.Equal(t, "plain", unescapeString("plain", schemeAll))
}

func TestDecodedView(t *testing.T) {
	t.Parallel()
	far := strings.Repeat(".", 40)
	s := "ab%41cd" + far + `x\u00e9&amp;y` + far + "%zz & \\q"
	dv := newDecodedView(s, 3, &allBytes)
	require.Len(t, dv.regions, 2, "two clusters of escapes; the last text has none")
	require.Equal(t, "abAcd.", dv.text(&dv.regions[0]))
	require.Equal(t, "..xé&y..", dv.text(&dv.regions[1]))

	rg := &dv.regions[1]
	at := func(sub string) int { return strings.Index(dv.text(rg), sub) }
	orig := func(sub string) string {
		sp := dv.original(rg, at(sub), at(sub)+len(sub))
		return s[sp.start:sp.end]
	}
	require.Equal(t, `x\u00e9&amp;y`, orig("xé&y"))
	require.Equal(t, `\u00e9`, orig("é"))
	require.Equal(t, `\u00e9`, orig("é"[1:]), "a span from inside an escape's bytes takes the whole escape")
	require.Equal(t, `\u00e9`, orig("é"[:1]))
	require.Equal(t, `&amp;y.`, orig("&y."))
	require.Equal(t, `..x`, orig("..x"))

	require.Empty(t, newDecodedView("no escapes & none % here \\z", 8, &allBytes).regions)
	require.Empty(t, newDecodedView("", 8, &allBytes).regions)

	// An escape of no byte of a form ends the context of the others, and
	// has no region of its own.
	var letters [256]bool
	for c := 'a'; c <= 'z'; c++ {
		letters[c] = true
	}
	dv = newDecodedView("x%20ab%61cd%2Fef%2Fgh%62ij", 3, &letters)
	require.Len(t, dv.regions, 2)
	require.Equal(t, "abacd", dv.text(&dv.regions[0]))
	require.Equal(t, "ghbij", dv.text(&dv.regions[1]))
	require.Empty(t, newDecodedView("a%20b%2Fc", 3, &letters).regions)
}

var allBytes = func() (set [256]bool) {
	for c := range set {
		set[c] = true
	}
	return set
}()

// FuzzDecodedView: every escape of a text is in a region; a region's view
// is the text of the region decoded; the regions are apart and in order;
// every byte of a view comes from its region, in order.
func FuzzDecodedView(f *testing.F) {
	f.Add(`ab%41cd x\u00e9&amp;y %zz &#x1F600; \uD83D\uDE00`, uint8(3))
	f.Add(`%%41\\\\u0041&&#65;;`, uint8(0))
	f.Add("&nvlt;&semi;&ampx;", uint8(1))
	f.Fuzz(func(t *testing.T, s string, reach uint8) {
		dv := newDecodedView(s, int(reach), &allBytes)
		defer dv.release()
		last := -1
		for k := range dv.regions {
			rg := &dv.regions[k]
			require.Greater(t, rg.start, last, "regions apart and in order")
			require.LessOrEqual(t, rg.end, len(s))
			require.Less(t, rg.first, rg.last, "a region has an escape")
			view := dv.text(rg)
			require.Equal(t, unescapeString(s[rg.start:rg.end], schemeAll), view)
			prev := rg.start
			for v := range len(view) {
				start, end := dv.source(rg, rg.at+v)
				require.True(t, rg.start <= start && start < end && end <= rg.end, "byte %d of the view from [%d, %d)", v, start, end)
				require.GreaterOrEqual(t, start, prev)
				prev = start
			}
			last = rg.end
		}
		// The escapes: wherever one starts, read left to right, each in a
		// region.
		k := 0
		for i := 0; i < len(s); i++ {
			if _, end := unescapeAt(nil, s, i, schemeAll); end >= 0 {
				require.Less(t, k, len(dv.escapes), "escape at %d missed", i)
				require.Equal(t, i, int(dv.escapes[k].start))
				k, i = k+1, end-1
			}
		}
		require.Len(t, dv.escapes, k)
		for _, rg := range dv.regions {
			for _, e := range dv.escapes[rg.first:rg.last] {
				_, end := unescapeAt(nil, s, int(e.start), schemeAll)
				require.True(t, rg.start <= int(e.start) && end <= rg.end)
			}
		}
		if len(dv.regions) > 0 {
			require.Equal(t, len(dv.escapes), dv.regions[len(dv.regions)-1].last)
		}
	})
}

// The benchmark's results hold each secret once, escaped: each is redacted.
func TestRedactEscapedResult(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"plain", "mixed", "dense"} {
		out := Redact(escapedResult(kind), escapedSecrets)
		require.Equal(t, len(escapedSecrets), strings.Count(out, Redacted), kind)
		for _, sec := range escapedSecrets {
			require.NotContains(t, unescapeString(out, schemeAll), sec, kind)
		}
	}
}

// Named references read again come from knownRefs, which agrees with the
// html package's table.
func TestKnownRefs(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"&amp;", "&lt;", "&gt;", "&quot;", "&nbsp;", "&plus;", "&sol;", "&CounterClockwiseContourIntegral;", "&nvlt;"} {
		got, end := unescapeAt(nil, ref, 0, schemeAll)
		require.Equal(t, len(ref), end)
		require.Equal(t, html.UnescapeString(ref), string(got))
	}
	for ref, r := range *knownRefs.Load() {
		require.Equal(t, html.UnescapeString(ref), r, ref)
	}
	require.Contains(t, *knownRefs.Load(), "&plus;")
	require.NotContains(t, *knownRefs.Load(), "&nosuch;")
	_, end := unescapeAt(nil, "&nosuch;", 0, schemeAll)
	require.Equal(t, -1, end)
}
