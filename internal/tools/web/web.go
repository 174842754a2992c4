// Package web holds the built-in web tools of tools.md: fetch_url (a page as
// readable text) and http_request (one HTTP call, optionally authenticated
// with a secret). They reach the network only through tc.Fetch, the scoped
// fetcher of the call's resolved network grant, and secrets only through
// tc.Secrets.
//
// Shared rules:
//
//   - No fetcher (tc.Fetch nil) → not_available "Network capability not
//     configured for this personality."
//   - A refusal of the fetcher (tool.ErrHostNotAllowed: a host outside the
//     grant or on the deny list, a private address, a bad scheme, too many
//     redirects) and any other fetch failure (connection refused, timeout)
//     is returned as a Go error, so the worker reports its message verbatim
//     ("HOST_NOT_ALLOWED: <detail>") as execution_failed and records the
//     denial. A cancelled call returns the context's cause.
//   - Redirects are followed by the fetcher (at most 4); "<final url>" in
//     the outputs below is the URL of the last request. The fetcher drops
//     credential headers (Authorization, Cookie, API keys) once a redirect
//     leaves the first request's origin.
//   - Bodies are cut by the fetcher at its cap (10 MiB by default); a cut
//     body is flagged in the output.
//   - Content types: text/html and application/xhtml+xml are HTML; text/*,
//     JSON, XML, JavaScript, YAML, TOML, CSV and form data (and any
//     +json, +xml or +yaml type) are text; a missing, unparsable or
//     application/octet-stream type is sniffed from the body (HTML, text or
//     binary); every other type is binary. Text is decoded to UTF-8 from
//     the charset parameter (HTML also from a BOM or <meta charset>);
//     invalid UTF-8 becomes U+FFFD.
//
// The package imports no I/O package (os, net, net/http, ...): the
// toolimports analyzer keeps it that way.
package web

import (
	"bytes"
	"mime"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/capstanhq/capstan/tool"
)

// Toolset is the toolset label of every tool of this package.
const Toolset = "web"

// MsgNoNetwork is the not_available message of a call without a fetcher.
const MsgNoNetwork = "Network capability not configured for this personality."

// MsgNoSecrets is the not_available message of an http_request call with
// auth_secret but without a secrets accessor.
const MsgNoSecrets = "Secrets capability not configured for this personality."

// Tools returns fetch_url and http_request, in that order.
func Tools() []tool.Tool {
	return []tool.Tool{FetchURL(), HTTPRequest()}
}

// anyHost declares network {allowed_hosts: ["*"]}: the personality's allow
// list is the real ceiling.
func anyHost() *tool.Network { return &tool.Network{AllowedHosts: []string{"*"}} }

// noNetwork is the result of a call without a fetcher.
func noNetwork() tool.Result { return tool.Fail(tool.CodeNotAvailable, MsgNoNetwork) }

// headerValue returns the first value of header name in h, matching the
// name case-insensitively, or "".
func headerValue(h map[string][]string, name string) string {
	if vs, ok := h[name]; ok && len(vs) > 0 {
		return vs[0]
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// bodyKind is how a tool treats a response body.
type bodyKind int

const (
	kindBinary bodyKind = iota
	kindText
	kindHTML
)

// content is a response body's classified type.
type content struct {
	kind bodyKind
	// header is the Content-Type header as sent ("" when absent).
	header string
	// mediaType is the lower-case media type used ("text/html"), sniffed
	// when sniffed is true.
	mediaType string
	// charset is the charset parameter of the header, if any.
	charset string
	sniffed bool
}

// label is the content type as fetch_url reports it: the header as sent,
// followed by " (sniffed as <type>)" when the body decided; "<type>
// (sniffed)" when there was no header.
func (c content) label() string {
	switch {
	case !c.sniffed:
		return c.header
	case c.header == "":
		return c.mediaType + " (sniffed)"
	}
	return c.header + " (sniffed as " + c.mediaType + ")"
}

// typeName is the content type for messages: the header as sent, or the
// sniffed media type when there was none.
func (c content) typeName() string {
	if c.header != "" {
		return c.header
	}
	return c.mediaType
}

// classify decides how to read body from its Content-Type header, sniffing
// the body when the header is missing, unparsable or
// application/octet-stream.
func classify(header string, body []byte) content {
	header = strings.TrimSpace(header)
	c := content{header: header}
	mt, params, err := mime.ParseMediaType(header)
	if err == nil {
		c.mediaType, c.charset = mt, params["charset"]
		switch {
		case mt == "text/html" || mt == "application/xhtml+xml":
			c.kind = kindHTML
			return c
		case textType(mt):
			c.kind = kindText
			return c
		case mt != "application/octet-stream" && mt != "binary/octet-stream":
			c.kind = kindBinary
			return c
		}
	}
	c.sniffed = true
	switch {
	case looksHTML(body):
		c.kind, c.mediaType = kindHTML, "text/html"
	case looksText(body):
		c.kind, c.mediaType = kindText, "text/plain"
	default:
		c.kind, c.mediaType = kindBinary, "application/octet-stream"
	}
	return c
}

// textApplicationTypes are application/* media types that are text.
var textApplicationTypes = map[string]bool{
	"application/json":                  true,
	"application/x-ndjson":              true,
	"application/xml":                   true,
	"application/javascript":            true,
	"application/ecmascript":            true,
	"application/x-javascript":          true,
	"application/yaml":                  true,
	"application/x-yaml":                true,
	"application/toml":                  true,
	"application/csv":                   true,
	"application/sql":                   true,
	"application/graphql":               true,
	"application/x-www-form-urlencoded": true,
	"application/x-sh":                  true,
}

// textType reports whether media type mt (lower case) is text.
func textType(mt string) bool {
	if strings.HasPrefix(mt, "text/") || textApplicationTypes[mt] {
		return true
	}
	for _, suffix := range []string{"+json", "+xml", "+yaml"} {
		if strings.HasSuffix(mt, suffix) {
			return true
		}
	}
	return false
}

// sniffLen is how much of a body the sniffers look at.
const sniffLen = 8192

// htmlSignatures are the WHATWG MIME sniffing patterns for HTML (lower
// case); each must be followed by a space or '>' (checked by looksHTML).
var htmlSignatures = []string{
	"<!doctype html", "<html", "<head", "<script", "<iframe", "<h1", "<div",
	"<font", "<table", "<a", "<style", "<title", "<b", "<body", "<br", "<p", "<!--",
}

// looksHTML reports whether body starts, after white space and a UTF-8 BOM,
// with one of the WHATWG HTML signatures.
func looksHTML(body []byte) bool {
	b := bytes.TrimPrefix(body[:min(len(body), sniffLen)], []byte("\xef\xbb\xbf"))
	b = bytes.TrimLeft(b, "\t\n\f\r ")
	for _, sig := range htmlSignatures {
		if len(b) > len(sig) && strings.EqualFold(string(b[:len(sig)]), sig) {
			if next := b[len(sig)]; next == ' ' || next == '>' {
				return true
			}
		}
	}
	return false
}

// looksText reports whether the start of body is UTF-8 without control
// characters other than white space and ESC. An incomplete rune at the end
// of the sample (a cut body) is allowed.
func looksText(body []byte) bool {
	b := body[:min(len(body), sniffLen)]
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return len(b)-i < utf8.UTFMax && !utf8.FullRune(b[i:])
		}
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' && r != '\f' && r != 0x1b {
			return false
		}
		i += size
	}
	return true
}

// decodeText returns body as valid UTF-8: decoded from the charset the
// header names (for HTML also from a BOM or a <meta> charset), else taken as
// UTF-8; invalid sequences become U+FFFD.
func decodeText(c content, body []byte) string {
	if c.kind == kindHTML {
		enc, _, _ := charset.DetermineEncoding(body, c.header)
		if out, err := enc.NewDecoder().Bytes(body); err == nil {
			body = out
		}
	} else if c.charset != "" {
		if enc, _ := charset.Lookup(c.charset); enc != nil {
			if out, err := enc.NewDecoder().Bytes(body); err == nil {
				body = out
			}
		}
	}
	return strings.ToValidUTF8(string(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))), "\uFFFD")
}

// cutRunes returns the first n code points of s and whether s was longer.
func cutRunes(s string, n int) (string, bool) {
	if len(s) <= n { // n bytes hold at least n code points
		return s, false
	}
	i := 0
	for k := range s {
		if i == n {
			return s[:k], true
		}
		i++
	}
	return s, false
}
