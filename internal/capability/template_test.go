package capability

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// values renders every ref as "<" + ref + ">".
func values(ref string) (string, error) { return "<" + ref + ">", nil }

func TestParseSecretTemplate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		template string
		refs     []string
		rendered string
		err      string
	}{
		{name: "bearer", template: "Bearer {{http/github/token}}", refs: []string{"http/github/token"}, rendered: "Bearer <http/github/token>"},
		{name: "alone", template: "{{a}}", refs: []string{"a"}, rendered: "<a>"},
		{name: "two refs", template: "{{u/name}}:{{u/pass}}", refs: []string{"u/name", "u/pass"}, rendered: "<u/name>:<u/pass>"},
		{name: "repeated ref once", template: "{{a}} {{b}} {{a}}", refs: []string{"a", "b"}, rendered: "<a> <b> <a>"},
		{name: "text after", template: "key={{k}}; v=1", refs: []string{"k"}, rendered: "key=<k>; v=1"},
		{name: "single braces in text", template: "{x} {{k}} }", refs: []string{"k"}, rendered: "{x} <k> }"},
		{name: "brace right after", template: "{{k}}}", refs: []string{"k"}, rendered: "<k>}"},
		{name: "spaces are part of the ref", template: "{{ k }}", refs: []string{" k "}, rendered: "< k >"},
		{name: "tab allowed", template: "a\t{{k}}", refs: []string{"k"}, rendered: "a\t<k>"},
		{name: "no placeholder", template: "Bearer abc", err: "invalid template: it has no {{ref}} placeholder"},
		{name: "empty", template: "", err: "invalid template: it has no {{ref}} placeholder"},
		{name: "unterminated", template: "Bearer {{a/b", err: `invalid template: "{{" at byte 7 has no closing "}}"`},
		{name: "unopened", template: "a}} {{b}}", err: `invalid template: "}}" at byte 1 has no opening "{{"`},
		{name: "unopened after placeholder", template: "{{b}} c}}", err: `invalid template: "}}" at byte 7 has no opening "{{"`},
		{name: "empty placeholder", template: "x {{}}", err: "invalid template: placeholder 1 is empty"},
		{name: "nested open", template: "{{a}}{{{b}}", err: `invalid template: placeholder 2 contains "{" or "}"`},
		{name: "brace inside", template: "{{a}b}}", err: `invalid template: placeholder 1 contains "{" or "}"`},
		{name: "line break", template: "Bearer {{a}}\r\nX-Evil: 1", err: "invalid template: it contains a control character at byte 12 (a line break, NUL, ...)"},
		{name: "NUL in a ref", template: "{{a\x00}}", err: "invalid template: it contains a control character at byte 3 (a line break, NUL, ...)"},
		{name: "DEL", template: "\x7f{{a}}", err: "invalid template: it contains a control character at byte 0 (a line break, NUL, ...)"},
		{name: "too long", template: "{{a}}" + strings.Repeat("x", MaxSecretTemplateLen), err: "invalid template: it is longer than 8192 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := ParseSecretTemplate(tt.template)
			if tt.err != "" {
				require.EqualError(t, err, tt.err)
				var te *TemplateError
				require.True(t, errors.As(err, &te))
				require.True(t, tpl.IsZero())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.refs, tpl.Refs())
			got, err := tpl.Render(values)
			require.NoError(t, err)
			require.Equal(t, tt.rendered, got)
		})
	}
}

func TestSecretTemplateErrorsNeverQuoteIt(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"zz-ref-7a {{zz-ref-7a", "{{zz-ref-7a}b}}", "zz-ref-7a}}", "{{zz-ref-7a}}\n", "{{zz-ref-7a/../x}}"} {
		err := ValidateSecretTemplate(s)
		require.Error(t, err, s)
		require.NotContains(t, err.Error(), "zz-ref", s)
	}
}

func TestRenderStopsAtTheFirstError(t *testing.T) {
	t.Parallel()
	tpl, err := ParseSecretTemplate("{{a}} {{b}}")
	require.NoError(t, err)
	var asked []string
	boom := errors.New("boom")
	got, err := tpl.Render(func(ref string) (string, error) {
		asked = append(asked, ref)
		return "", boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, got)
	require.Equal(t, []string{"a"}, asked)
}

func TestValidateSecretTemplate(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateSecretTemplate("Bearer {{providers/x/token}}"))
	require.NoError(t, ValidateSecretTemplate("{{a/b}}:{{c}}"))
	for _, tt := range []struct{ template, err string }{
		{"Bearer {{providers/../x}}", "invalid template: placeholder 1 is not a valid secret ref (want segments separated by /, none empty, . or .., and no *)"},
		{"{{a}} {{ a }}", "invalid template: placeholder 2 has spaces around its ref (write {{a/b}}, not {{ a/b }})"},
		{"{{a/*}}", "invalid template: placeholder 1 is not a valid secret ref (want segments separated by /, none empty, . or .., and no *)"},
		{"{{/a}}", "invalid template: placeholder 1 is not a valid secret ref (want segments separated by /, none empty, . or .., and no *)"},
		{"no placeholder", "invalid template: it has no {{ref}} placeholder"},
	} {
		require.EqualError(t, ValidateSecretTemplate(tt.template), tt.err, tt.template)
	}
}

func TestValidRefRefusesTemplateBraces(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{"a{b", "a}b", "http/x}} {{http/y", "{{a}}"} {
		require.False(t, ValidRef(ref), ref)
		require.False(t, RefMatch("*", ref), ref)
	}
	require.True(t, ValidRef("a b/c"), "spaces inside a segment stay valid")
}

func FuzzSecretTemplate(f *testing.F) {
	for _, s := range []string{"Bearer {{http/github/token}}", "{{a}}:{{b}}", "{{", "}}", "{{}}", "{{{a}}}", "a}}{{b", "{{a\nb}}", "x {{ a }} y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseSecretTemplate(s)
		if err != nil {
			var te *TemplateError
			require.True(t, errors.As(err, &te))
			require.True(t, strings.HasPrefix(err.Error(), "invalid template: "))
			require.Error(t, ValidateSecretTemplate(s), "what does not parse does not validate")
			return
		}
		refs := tpl.Refs()
		require.NotEmpty(t, refs)
		for _, ref := range refs {
			require.NotEmpty(t, ref)
			require.False(t, strings.ContainsAny(ref, "{}"), "ref %q", ref)
		}
		// Rendering the refs back as placeholders gives the template again.
		again, err := tpl.Render(func(ref string) (string, error) { return "{{" + ref + "}}", nil })
		require.NoError(t, err)
		require.Equal(t, s, again)
		// The literal text carries no control character and no "{{" or
		// "}}": rendering with safe values leaves exactly the placeholders'
		// number of values and a header-safe string.
		out, err := tpl.Render(func(string) (string, error) { return "V", nil })
		require.NoError(t, err)
		for i := range len(out) {
			c := out[i]
			require.False(t, (c < ' ' && c != '\t') || c == 0x7f, "control character in %q", out)
		}
		if verr := ValidateSecretTemplate(s); verr == nil {
			for _, ref := range refs {
				require.True(t, ValidRef(ref), ref)
			}
		}
	})
}
