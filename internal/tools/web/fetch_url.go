package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/tool"
)

// FetchURLName is fetch_url's name.
const FetchURLName = "fetch_url"

// fetch_url limits.
const (
	// FetchURLMaxResultChars is fetch_url's max_result_chars.
	FetchURLMaxResultChars = 100000
	// MaxChars is the largest max_chars accepted: the text never needs to be
	// longer than the result may be.
	MaxChars = FetchURLMaxResultChars
	// DefaultMaxChars is max_chars when the call gives none.
	DefaultMaxChars = 40000
	// ProgressBytes is the body size above which fetch_url emits a user
	// progress event (1 MiB).
	ProgressBytes = 1 << 20
	// excerptChars is the longest body excerpt in an HTTP error message.
	excerptChars = 300
)

// acceptHeader asks for what fetch_url reads best.
const acceptHeader = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.8"

const fetchURLSchema = `{
  "type": "object",
  "properties": {
    "url": {
      "type": "string",
      "format": "uri",
      "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
      "minLength": 1,
      "maxLength": 8192,
      "description": "absolute http or https URL of the page"
    },
    "max_chars": {
      "type": "integer",
      "minimum": 1,
      "maximum": 100000,
      "default": 40000,
      "description": "longest text returned, in characters; longer text is cut and the cut is marked"
    }
  },
  "required": ["url"],
  "additionalProperties": false
}`

type fetchURLArgs struct {
	URL      string   `json:"url"`
	MaxChars *float64 `json:"max_chars"`
}

// FetchURL returns the fetch_url tool: GET url and return its readable
// text. The result, for a 2xx response with an HTML or text body, is
//
//	URL: <final url>
//	Content-Type: <content type>
//	Title: <title>
//	Note: the body was cut at the download limit of <n> bytes
//
//	<text>
//	[truncated at max_chars: <k> of <N> characters shown]
//
// where the Title line appears only for HTML with a non-empty <title>, the
// Note line only when the fetcher cut the body, and the last line (after
// "\n") only when the text is longer than max_chars (k = max_chars; N is the
// text's full length; characters are code points; the result's Full is then
// the same without the cut: the header lines and the whole text). <content type> is the
// Content-Type header as sent, "<header> (sniffed as <type>)" or "<type>
// (sniffed)" when the body decided (see the package comment). HTML is
// reduced to readable text (see htmlToText); other text is returned as is.
// An empty text reads "(no readable text)".
//
// Failures: a non-2xx status → execution_failed "HTTP <status> from <final
// url>" (status as "404 Not Found"), followed by "\n" and the first 300
// characters of the body's text on one line (then "...") when there is
// any; a binary body → execution_failed "Cannot read <final url>: content
// type <type> is not HTML or text". A body over 1 MiB emits the user
// progress event "downloaded <n> MB from <host>" (n with one decimal, MB =
// 2^20 bytes, host as in the final URL), best effort.
func FetchURL() tool.Tool {
	return tool.Tool{
		Name:        FetchURLName,
		SideEffects: tool.SideEffectsNone,
		Description: "Fetches a web page (HTTP GET) and returns its readable text: HTML is reduced to " +
			"headings, paragraphs, lists, tables and [link text](url), without scripts, styles or navigation; " +
			"other text (JSON, plain text, XML) is returned as is. The result starts with the final URL after " +
			"redirects and the content type. Binary content is refused.",
		Schema:            json.RawMessage(fetchURLSchema),
		Toolset:           Toolset,
		MaxResultChars:    FetchURLMaxResultChars,
		Capabilities:      tool.Capabilities{Network: anyHost()},
		OutputIsUntrusted: true,
		Execute:           tool.Typed(fetchURL),
	}
}

func fetchURL(ctx context.Context, a fetchURLArgs, tc *tool.Context) (tool.Result, error) {
	if tc == nil || tc.Fetch == nil {
		return noNetwork(), nil
	}
	if a.URL == "" {
		return tool.InvalidArguments("args.url is required"), nil
	}
	maxChars := DefaultMaxChars
	if a.MaxChars != nil {
		m := *a.MaxChars
		if m != math.Trunc(m) || m < 1 || m > MaxChars {
			return tool.InvalidArguments(fmt.Sprintf("args.max_chars must be a whole number from 1 to %d", MaxChars)), nil
		}
		maxChars = int(m)
	}

	resp, err := tc.Fetch.Fetch(ctx, tool.Request{
		Method: "GET",
		URL:    a.URL,
		Header: map[string][]string{"Accept": {acceptHeader}},
	})
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, context.Cause(ctx)
		}
		return tool.Result{}, err // denials verbatim: HOST_NOT_ALLOWED: ...
	}
	final := resp.FinalURL
	if final == "" {
		final = a.URL
	}
	finalURL, _ := url.Parse(final) // nil on error: links stay as written
	if len(resp.Body) > ProgressBytes {
		_ = tc.Emit(tool.Progress{Audience: tool.AudienceUser, Message: downloadedMsg(len(resp.Body), finalURL)}) // best effort
	}

	c := classify(headerValue(resp.Header, "Content-Type"), resp.Body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return tool.Fail(tool.CodeExecutionFailed, httpErrorMsg(resp, final, c, finalURL)), nil
	}
	if c.kind == kindBinary {
		return tool.Fail(tool.CodeExecutionFailed,
			fmt.Sprintf("Cannot read %s: content type %s is not HTML or text", final, c.typeName())), nil
	}

	var b strings.Builder
	b.WriteString("URL: " + final + "\nContent-Type: " + c.label() + "\n")
	text := decodeText(c, resp.Body)
	if c.kind == kindHTML {
		p := htmlToText(text, finalURL)
		text = p.Text
		if p.Title != "" {
			b.WriteString("Title: " + p.Title + "\n")
		}
	}
	if resp.Truncated {
		fmt.Fprintf(&b, "Note: the body was cut at the download limit of %d bytes\n", len(resp.Body))
	}
	b.WriteByte('\n')
	if strings.TrimSpace(text) == "" {
		b.WriteString("(no readable text)")
		return tool.OK(b.String()), nil
	}
	cut, truncated := cutRunes(text, maxChars)
	head := b.String()
	b.WriteString(cut)
	if truncated {
		fmt.Fprintf(&b, "\n[truncated at max_chars: %d of %d characters shown]", maxChars, utf8.RuneCountInString(text))
	}
	res := tool.OK(b.String())
	if truncated {
		// The whole text, for the worker to keep by reference.
		res.Full = head + text
	}
	return res, nil
}

// downloadedMsg is "downloaded <n> MB from <host>".
func downloadedMsg(n int, u *url.URL) string {
	host := "unknown host"
	if u != nil && u.Host != "" {
		host = u.Host
	}
	return "downloaded " + strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MB from " + host
}

// httpErrorMsg is "HTTP <status> from <final url>", then "\n" and an excerpt
// of the body's text on one line, when it has text.
func httpErrorMsg(resp *tool.Response, final string, c content, base *url.URL) string {
	msg := "HTTP " + statusText(resp) + " from " + final
	if c.kind == kindBinary {
		return msg
	}
	text := decodeText(c, resp.Body)
	if c.kind == kindHTML {
		text = htmlToText(text, base).Text
	}
	text = strings.Join(strings.Fields(text), " ")
	if text == "" {
		return msg
	}
	if cut, truncated := cutRunes(text, excerptChars); truncated {
		text = cut + "..."
	}
	return msg + "\n" + text
}

// statusText is "<code> <reason>" ("404 Not Found"), from resp.Status when
// it starts with the code.
func statusText(resp *tool.Response) string {
	code := strconv.Itoa(resp.StatusCode)
	if s := strings.TrimSpace(resp.Status); strings.HasPrefix(s, code) {
		return s
	}
	return code
}
