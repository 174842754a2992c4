package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// HTTPRequestName is http_request's name.
const HTTPRequestName = "http_request"

// HTTPRequestMaxResultChars is http_request's max_result_chars.
const HTTPRequestMaxResultChars = 100000

// DefaultAuthScheme is auth_scheme when the call gives none.
const DefaultAuthScheme = "Bearer"

// SecretPattern is the secret refs http_request declares: auth_secret must
// lie below http/ ("http/github/token").
const SecretPattern = "http/*"

// masked is what a credential response header's value is shown as.
const masked = "[masked]"

const httpRequestSchema = `{
  "type": "object",
  "properties": {
    "method": {
      "type": "string",
      "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"],
      "description": "HTTP method"
    },
    "url": {
      "type": "string",
      "format": "uri",
      "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
      "minLength": 1,
      "maxLength": 8192,
      "description": "absolute http or https URL"
    },
    "headers": {
      "type": "object",
      "description": "request headers, name to value",
      "maxProperties": 50,
      "propertyNames": {"pattern": "^[!#$%&'*+.^_` + "`" + `|~0-9A-Za-z-]{1,256}$"},
      "additionalProperties": {"type": "string", "maxLength": 8192, "pattern": "^[^\\r\\n\\x00]*$"}
    },
    "body": {
      "type": "string",
      "maxLength": 1048576,
      "description": "request body; without a Content-Type header, JSON is sent as application/json and anything else as text/plain; charset=utf-8"
    },
    "auth_secret": {
      "type": "string",
      "minLength": 1,
      "maxLength": 512,
      "description": "secret ref (such as http/github/token) whose value is sent as the Authorization header, only to hosts the personality binds the secret to; the value is never shown"
    },
    "auth_scheme": {
      "type": "string",
      "pattern": "^[!#$%&'*+.^_` + "`" + `|~0-9A-Za-z-]{0,64}$",
      "default": "Bearer",
      "description": "Authorization scheme put before the secret (Bearer, token, Basic, ...); empty sends the secret alone"
    }
  },
  "required": ["method", "url"],
  "dependentRequired": {"auth_scheme": ["auth_secret"]},
  "additionalProperties": false
}`

// methods are the methods http_request sends.
var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"}

type httpRequestArgs struct {
	Method     string            `json:"method"`
	URL        string            `json:"url"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body"`
	AuthSecret string            `json:"auth_secret"`
	AuthScheme *string           `json:"auth_scheme"`
}

// HTTPRequest returns the http_request tool: one HTTP request, the response
// shown whatever its status (the caller judges). The result is
//
//	HTTP <status> from <final url>
//	<Header>: <value>
//	...
//
//	<body>
//	[body cut at the download limit of <n> bytes]
//
// with status as "200 OK"; the response headers sorted by name, one line
// per value, each value of a credential header (Authorization,
// Proxy-Authorization, Cookie, Set-Cookie, and any name containing "token",
// "secret", "password", "credential", "api-key" or "apikey",
// case-insensitively) shown as "[masked]"; a text body (HTML included) as
// UTF-8 text, a binary one as "<<n> bytes of <type>>", an empty one (always
// for HEAD) as "(empty body)"; the last line (after "\n") only when the
// fetcher cut the body. The request's own headers are never shown.
//
// auth_secret: the tool asks the fetcher to send the secret ref as
// "Authorization: <auth_scheme> {{<ref>}}" (the value alone when
// auth_scheme is ""); the fetcher resolves the value through the call's
// secrets accessor (which must allow the ref: refs below http/) and sends
// it only to a host the personality's secrets.send_to binds the ref to,
// never to a redirect hop that leaves the URL's origin. The tool never
// holds the value; should the response echo it, the fetcher has replaced
// it by "[REDACTED]". A headers entry named Authorization (any case)
// together with auth_secret is input_invalid; a secret ref the grant does
// not allow is the accessor's error, returned verbatim
// ("SECRET_NOT_DECLARED: ..."), and so is a host the ref is not bound to
// ("SECRET_DESTINATION: this secret may not be sent to <host>"), both
// before anything is sent; auth_secret without a secrets accessor is
// not_available "Secrets capability not configured for this
// personality."; a value with a line break or NUL is execution_failed.
func HTTPRequest() tool.Tool {
	return tool.Tool{
		Name:        HTTPRequestName,
		SideEffects: tool.SideEffectsExclusive,
		Description: "Sends one HTTP request (GET, POST, PUT, PATCH, DELETE or HEAD) and returns the status line, " +
			"the response headers and the body, whatever the status. To authenticate, name a secret in " +
			"auth_secret: its value is sent as the Authorization header (\"Bearer <value>\" by default), only to the hosts " +
			"the personality lets that secret go to, and is never shown.",
		Schema:            json.RawMessage(httpRequestSchema),
		Toolset:           Toolset,
		MaxResultChars:    HTTPRequestMaxResultChars,
		Capabilities:      tool.Capabilities{Network: anyHost(), Secrets: []string{SecretPattern}},
		OutputIsUntrusted: true,
		Execute:           tool.Typed(httpRequest),
	}
}

func httpRequest(ctx context.Context, a httpRequestArgs, tc *tool.Context) (tool.Result, error) {
	if tc == nil || tc.Fetch == nil {
		return noNetwork(), nil
	}
	if msg := a.check(); msg != "" {
		return tool.InvalidArguments(msg), nil
	}

	header := make(map[string][]string, len(a.Headers)+2)
	for k, v := range a.Headers {
		header[k] = []string{v}
	}
	var body []byte
	if a.Body != nil && *a.Body != "" {
		body = []byte(*a.Body)
		if headerValue(header, "Content-Type") == "" {
			ct := "text/plain; charset=utf-8"
			if json.Valid(body) {
				ct = "application/json"
			}
			header["Content-Type"] = []string{ct}
		}
	}
	var secretHeaders map[string]string
	if a.AuthSecret != "" {
		if tc.Secrets == nil {
			return tool.Fail(tool.CodeNotAvailable, MsgNoSecrets), nil
		}
		// Braces delimit refs in a template, and no valid ref holds one:
		// refuse such a ref as the accessor refuses every invalid ref,
		// rather than let it reshape the template.
		if strings.ContainsAny(a.AuthSecret, "{}") {
			return tool.Result{}, tool.Deny(tool.ErrSecretNotDeclared, "requested secret is not permitted for this tool")
		}
		template := "{{" + a.AuthSecret + "}}"
		scheme := DefaultAuthScheme
		if a.AuthScheme != nil {
			scheme = *a.AuthScheme
		}
		if scheme != "" {
			template = scheme + " " + template
		}
		secretHeaders = map[string]string{"Authorization": template}
	}

	resp, err := tc.Fetch.Fetch(ctx, tool.Request{Method: a.Method, URL: a.URL, Header: header, Body: body, SecretHeaders: secretHeaders})
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		var she *tool.SecretHeaderError
		switch {
		case errors.Is(err, tool.ErrSecretValueInvalid):
			return tool.Fail(tool.CodeExecutionFailed,
				"The value of auth_secret cannot be sent in an HTTP header: it contains a line break or NUL."), nil
		case errors.As(err, &she):
			return tool.Result{}, fmt.Errorf("auth_secret: %w", she.Err) // names neither ref nor value
		}
		// Denials verbatim: HOST_NOT_ALLOWED, SECRET_NOT_DECLARED,
		// SECRET_DESTINATION: ...; never holds headers.
		return tool.Result{}, err
	}
	return tool.OK(formatResponse(resp, a.URL)), nil
}

// check re-checks what the schema guarantees (for callers that skip it) and
// what it cannot express; it returns "" or an argschema-style message.
func (a *httpRequestArgs) check() string {
	if !slices.Contains(methods, a.Method) {
		return fmt.Sprintf("args.method must be one of %s", strings.Join(methods, ", "))
	}
	if a.URL == "" {
		return "args.url is required"
	}
	for k, v := range a.Headers {
		switch {
		case !validHeaderName(k):
			return fmt.Sprintf("args.headers has an invalid header name %q", k)
		case strings.ContainsAny(v, "\r\n\x00"):
			return fmt.Sprintf("args.headers.%s must not contain a line break or NUL", k)
		case a.AuthSecret != "" && strings.EqualFold(k, "Authorization"):
			return fmt.Sprintf("args.headers.%s must not be set together with auth_secret, which is sent as the Authorization header", k)
		}
	}
	if a.AuthScheme != nil {
		if a.AuthSecret == "" {
			return "args.auth_scheme needs args.auth_secret"
		}
		if *a.AuthScheme != "" && !validHeaderName(*a.AuthScheme) {
			return "args.auth_scheme must be a single token such as Bearer"
		}
	}
	return ""
}

// validHeaderName reports whether s is an HTTP token (RFC 9110) of at most
// 256 characters.
func validHeaderName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// formatResponse renders resp as HTTPRequest documents.
func formatResponse(resp *tool.Response, requested string) string {
	final := resp.FinalURL
	if final == "" {
		final = requested
	}
	var b strings.Builder
	b.WriteString("HTTP " + statusText(resp) + " from " + final + "\n")
	names := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range resp.Header[k] {
			if credentialHeader(k) {
				v = masked
			}
			b.WriteString(k + ": " + v + "\n")
		}
	}
	b.WriteByte('\n')
	c := classify(headerValue(resp.Header, "Content-Type"), resp.Body)
	switch {
	case len(resp.Body) == 0:
		b.WriteString("(empty body)")
	case c.kind == kindBinary:
		fmt.Fprintf(&b, "<%d bytes of %s>", len(resp.Body), c.typeName())
	default:
		b.WriteString(decodeText(c, resp.Body))
	}
	if resp.Truncated {
		fmt.Fprintf(&b, "\n[body cut at the download limit of %d bytes]", len(resp.Body))
	}
	return b.String()
}

// credentialNames are response headers whose values are masked.
var credentialNames = []string{"authorization", "proxy-authorization", "cookie", "set-cookie", "set-cookie2"}

// credentialParts mark further credential headers by a part of their name.
var credentialParts = []string{"token", "secret", "password", "credential", "api-key", "apikey"}

// credentialHeader reports whether response header name carries a
// credential (case-insensitive; see HTTPRequest).
func credentialHeader(name string) bool {
	n := strings.ToLower(name)
	if slices.Contains(credentialNames, n) {
		return true
	}
	return slices.ContainsFunc(credentialParts, func(p string) bool { return strings.Contains(n, p) })
}
