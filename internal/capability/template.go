package capability

import (
	"fmt"
	"slices"
	"strings"
)

// MaxSecretTemplateLen is the longest secret header template, in bytes.
const MaxSecretTemplateLen = 8192

// SecretTemplate is a parsed secret header template: the value of a header
// that the fetch accessor builds at egress from literal text and secret
// values, such as "Bearer {{http/github/token}}". Build it with
// ParseSecretTemplate.
//
// Syntax: literal text and one or more placeholders "{{" ref "}}". The ref
// is taken exactly as written (no spaces are trimmed) and may not contain
// "{" or "}"; the literal text may not contain "{{" or "}}" (there is no
// escape) but may contain single braces. No part may contain a control
// character other than a tab (a line break or NUL would split the header).
// The whole template is at most MaxSecretTemplateLen bytes.
type SecretTemplate struct {
	parts []templatePart
}

type templatePart struct {
	text  string // literal text, or the ref of a placeholder
	isRef bool
}

// TemplateError is a malformed secret header template. Its message names
// the problem and, where there is one, the byte offset or the placeholder's
// number (from 1); it never quotes the template, which holds refs.
type TemplateError struct {
	Reason string
}

// Error returns "invalid template: <reason>".
func (e *TemplateError) Error() string { return "invalid template: " + e.Reason }

func templateErr(format string, args ...any) error {
	return &TemplateError{Reason: fmt.Sprintf(format, args...)}
}

// ParseSecretTemplate parses a secret header template (see SecretTemplate).
// It checks the syntax only: whether each ref is a valid ref that the call
// may send is the grant's decision (RefGrant.CheckDestination), so that an
// invalid ref is refused exactly like an undeclared one. Use
// ValidateSecretTemplate where refs are written by an operator. Errors are
// *TemplateError.
func ParseSecretTemplate(s string) (SecretTemplate, error) {
	if len(s) > MaxSecretTemplateLen {
		return SecretTemplate{}, templateErr("it is longer than %d bytes", MaxSecretTemplateLen)
	}
	for i := range len(s) {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return SecretTemplate{}, templateErr("it contains a control character at byte %d (a line break, NUL, ...)", i)
		}
	}
	var t SecretTemplate
	refs := 0
	for i := 0; i < len(s); {
		rest := s[i:]
		open, closing := strings.Index(rest, "{{"), strings.Index(rest, "}}")
		if closing >= 0 && (open < 0 || closing < open) {
			return SecretTemplate{}, templateErr(`"}}" at byte %d has no opening "{{"`, i+closing)
		}
		if open < 0 {
			t.parts = append(t.parts, templatePart{text: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{text: rest[:open]})
		}
		start := i + open + 2
		end := strings.Index(s[start:], "}}")
		if end < 0 {
			return SecretTemplate{}, templateErr(`"{{" at byte %d has no closing "}}"`, i+open)
		}
		refs++
		ref := s[start : start+end]
		switch {
		case ref == "":
			return SecretTemplate{}, templateErr("placeholder %d is empty", refs)
		case strings.ContainsAny(ref, "{}"):
			return SecretTemplate{}, templateErr(`placeholder %d contains "{" or "}"`, refs)
		}
		t.parts = append(t.parts, templatePart{text: ref, isRef: true})
		i = start + end + 2
	}
	if refs == 0 {
		return SecretTemplate{}, templateErr("it has no {{ref}} placeholder")
	}
	return t, nil
}

// ValidateSecretTemplate is ParseSecretTemplate plus a check that every
// placeholder holds a valid ref (ValidRef) without spaces around it: the check for templates an
// operator writes (a hosted MCP server's secret_headers), so a typo is
// reported when the file is read rather than as a denial on every call.
func ValidateSecretTemplate(s string) error {
	t, err := ParseSecretTemplate(s)
	if err != nil {
		return err
	}
	n := 0
	for _, p := range t.parts {
		if !p.isRef {
			continue
		}
		n++
		if strings.TrimSpace(p.text) != p.text {
			return templateErr("placeholder %d has spaces around its ref (write {{a/b}}, not {{ a/b }})", n)
		}
		if !ValidRef(p.text) {
			return templateErr("placeholder %d is not a valid secret ref (want segments separated by /, none empty, . or .., and no *)", n)
		}
	}
	return nil
}

// Refs returns the template's refs, each once, in order of first use.
func (t SecretTemplate) Refs() []string {
	var out []string
	for _, p := range t.parts {
		if p.isRef && !slices.Contains(out, p.text) {
			out = append(out, p.text)
		}
	}
	return out
}

// Render returns the template with every placeholder replaced by
// value(ref). It reports an error when value does for any ref, and then
// returns "".
func (t SecretTemplate) Render(value func(ref string) (string, error)) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if !p.isRef {
			b.WriteString(p.text)
			continue
		}
		v, err := value(p.text)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// IsZero reports whether t is the zero SecretTemplate (not parsed).
func (t SecretTemplate) IsZero() bool { return len(t.parts) == 0 }
