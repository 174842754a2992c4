package web_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
)

const htmlType = "text/html; charset=utf-8"

// articleServer serves testdata/article.html at /article, and /go
// redirecting to it on other.test.
func articleServer(t *testing.T) *server {
	t.Helper()
	page, err := os.ReadFile("testdata/article.html")
	require.NoError(t, err)
	var s *server
	s = newServer(t, map[string]http.HandlerFunc{
		"/article": respond(http.StatusOK, ptr(htmlType), string(page)),
		"/go":      redirect(func() string { return s.url("other.test", "/article") }),
	})
	return s
}

// articleText is the readable text of testdata/article.html served from base.
func articleText(base string) string {
	return `# Readable text

First paragraph with bold and [a relative link](` + base + `/guide?x=1). It wraps over several lines.

Café <tags> and an anchor and a script link.

## Steps

1. Install
2. Configure
  - nested item

Name | Value
alpha | 1

line one
  indented line

Line
break and a diagram image.

See https://example.org/.`
}

func TestFetchURLReadableHTML(t *testing.T) {
	t.Parallel()
	s := articleServer(t)
	u := s.url("site.test", "/article")
	rec := &recorder{}
	res := mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: fetcher(t, 0), EmitFunc: rec.emit})
	require.True(t, res.OK, res.Error)
	require.Equal(t, "URL: "+u+"\nContent-Type: "+htmlType+"\nTitle: Capstan & the Web\n\n"+articleText(s.url("site.test", "")), res.Value)
	for _, noise := range []string{"NOISE", "tracking", "color: red", "<b>", "&amp;", "x.png"} {
		require.NotContains(t, res.Value, noise)
	}
	require.Empty(t, rec.events(), "no progress for a small page")
	reqs := s.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "GET", reqs[0].Method)
	require.Contains(t, reqs[0].Header.Get("Accept"), "text/html")
}

func TestFetchURLReportsFinalURLAfterRedirect(t *testing.T) {
	t.Parallel()
	s := articleServer(t)
	res := mustCall(t, web.FetchURL(), obj{"url": s.url("site.test", "/go")}, &tool.Context{Fetch: fetcher(t, 0)})
	require.True(t, res.OK, res.Error)
	final := s.url("other.test", "/article")
	require.True(t, strings.HasPrefix(res.Value, "URL: "+final+"\nContent-Type: "+htmlType+"\n"), res.Value)
	require.Contains(t, res.Value, "[a relative link]("+s.url("other.test", "/guide?x=1")+")", "links resolve against the final URL")
}

func TestFetchURLContentTypes(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/json":        respond(http.StatusOK, ptr("application/json"), `{"a": [1, 2]}`),
		"/plain":       respond(http.StatusOK, ptr("text/plain; charset=utf-8"), "  <b>not html</b>\n\tkept as is  "),
		"/latin1":      respond(http.StatusOK, ptr("text/plain; charset=ISO-8859-1"), "caf\xe9"),
		"/latin1-meta": respond(http.StatusOK, ptr("text/html"), `<meta charset="windows-1252"><p>na`+"\xefve</p>"),
		"/untyped":     respond(http.StatusOK, nil, "<!DOCTYPE html><title>T</title><p>sniffed <i>page</i></p>"),
		"/untyped-txt": respond(http.StatusOK, nil, "just text"),
		"/octet-txt":   respond(http.StatusOK, ptr("application/octet-stream"), "plain after all"),
		"/xhtml":       respond(http.StatusOK, ptr("application/xhtml+xml"), `<html xmlns="http://www.w3.org/1999/xhtml"><body><p>x<br/>y</p></body></html>`),
		"/empty":       respond(http.StatusOK, ptr("text/html"), "<html><body><script>x()</script></body></html>"),
		"/png":         respond(http.StatusOK, ptr("image/png"), "\x89PNG\r\n\x1a\n\x00\x00"),
		"/untyped-bin": respond(http.StatusOK, nil, "\x00\x01\x02binary"),
	})
	tests := []struct {
		path   string
		header string // the Content-Type line's value
		text   string
	}{
		{"/json", "application/json", `{"a": [1, 2]}`},
		{"/plain", "text/plain; charset=utf-8", "  <b>not html</b>\n\tkept as is  "},
		{"/latin1", "text/plain; charset=ISO-8859-1", "café"},
		{"/latin1-meta", "text/html", "naïve"},
		{"/untyped", "text/html (sniffed)", "sniffed page"},
		{"/untyped-txt", "text/plain (sniffed)", "just text"},
		{"/octet-txt", "application/octet-stream (sniffed as text/plain)", "plain after all"},
		{"/xhtml", "application/xhtml+xml", "x\ny"},
		{"/empty", "text/html", "(no readable text)"},
	}
	f := fetcher(t, 0)
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			u := s.url("site.test", tt.path)
			res := mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: f})
			require.True(t, res.OK, res.Error)
			title := ""
			if tt.path == "/untyped" {
				title = "Title: T\n"
			}
			require.Equal(t, "URL: "+u+"\nContent-Type: "+tt.header+"\n"+title+"\n"+tt.text, res.Value)
		})
	}
	for path, typ := range map[string]string{"/png": "image/png", "/untyped-bin": "application/octet-stream"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			u := s.url("site.test", path)
			res := mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: f})
			require.Equal(t, tool.Fail(tool.CodeExecutionFailed, "Cannot read "+u+": content type "+typ+" is not HTML or text"), res)
		})
	}
}

func TestFetchURLMaxChars(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/long": respond(http.StatusOK, ptr("text/plain"), strings.Repeat("héllo ", 10)), // 60 code points
	})
	u := s.url("site.test", "/long")
	f := fetcher(t, 0)
	head := "URL: " + u + "\nContent-Type: text/plain\n\n"

	res := mustCall(t, web.FetchURL(), obj{"url": u, "max_chars": 8}, &tool.Context{Fetch: f})
	want := tool.OK(head + "héllo hé\n[truncated at max_chars: 8 of 60 characters shown]")
	want.Full = head + strings.Repeat("héllo ", 10) // the whole text, for a blob
	require.Equal(t, want, res)

	res = mustCall(t, web.FetchURL(), obj{"url": u, "max_chars": 60}, &tool.Context{Fetch: f})
	require.Equal(t, tool.OK(head+strings.Repeat("héllo ", 10)), res, "exactly max_chars is not cut")

	res = mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: f})
	require.Equal(t, tool.OK(head+strings.Repeat("héllo ", 10)), res, "the default is far above 60")
}

func TestFetchURLLargeDownloadEmitsProgress(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", (3<<20)/2/16) // 1.5 MiB
	s := newServer(t, map[string]http.HandlerFunc{
		"/big":   respond(http.StatusOK, ptr("text/plain"), big),
		"/exact": respond(http.StatusOK, ptr("text/plain"), big[:web.ProgressBytes]),
	})
	rec := &recorder{}
	tc := &tool.Context{Fetch: fetcher(t, 0), EmitFunc: rec.emit}
	res := mustCall(t, web.FetchURL(), obj{"url": s.url("site.test", "/big"), "max_chars": 10}, tc)
	require.True(t, res.OK, res.Error)
	require.Equal(t, []tool.Progress{{Audience: tool.AudienceUser, Message: "downloaded 1.5 MB from site.test:" + s.port}}, rec.events())

	res = mustCall(t, web.FetchURL(), obj{"url": s.url("site.test", "/exact"), "max_chars": 10}, tc)
	require.True(t, res.OK, res.Error)
	require.Len(t, rec.events(), 1, "exactly 1 MiB is not over 1 MB")

	// A failing EmitFunc does not fail the fetch: progress is best effort.
	tc.EmitFunc = func(tool.Progress) error { return errors.New("bus down") }
	res = mustCall(t, web.FetchURL(), obj{"url": s.url("site.test", "/big"), "max_chars": 10}, tc)
	require.True(t, res.OK, res.Error)
}

func TestFetchURLBodyCutByFetcher(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/page": respond(http.StatusOK, ptr("text/plain"), strings.Repeat("x", 100)),
	})
	u := s.url("site.test", "/page")
	res := mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: fetcher(t, 40)})
	require.Equal(t, tool.OK("URL: "+u+"\nContent-Type: text/plain\nNote: the body was cut at the download limit of 40 bytes\n\n"+strings.Repeat("x", 40)), res)
}

func TestFetchURLNon2xx(t *testing.T) {
	t.Parallel()
	s := newServer(t, map[string]http.HandlerFunc{
		"/missing": respond(http.StatusNotFound, ptr("text/html"), "<html><head><title>404</title><style>x{}</style></head><body><h1>Not  here</h1><p>Try\nagain.</p></body></html>"),
		"/long":    respond(http.StatusInternalServerError, ptr("text/plain"), strings.Repeat("e", 400)),
		"/bin":     respond(http.StatusForbidden, ptr("image/png"), "\x89PNG"),
		"/blank":   respond(http.StatusServiceUnavailable, ptr("text/plain"), ""),
	})
	f := fetcher(t, 0)
	tests := []struct{ path, want string }{
		{"/missing", "HTTP 404 Not Found from %s\n# Not here Try again."},
		{"/long", "HTTP 500 Internal Server Error from %s\n" + strings.Repeat("e", 300) + "..."},
		{"/bin", "HTTP 403 Forbidden from %s"},
		{"/blank", "HTTP 503 Service Unavailable from %s"},
	}
	for _, tt := range tests {
		u := s.url("site.test", tt.path)
		res := mustCall(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: f})
		require.Equal(t, tool.Fail(tool.CodeExecutionFailed, strings.Replace(tt.want, "%s", u, 1)), res, tt.path)
	}
}

func TestFetchURLDeniedHost(t *testing.T) {
	t.Parallel()
	s := articleServer(t)
	evil := newServer(t, map[string]http.HandlerFunc{"/": respond(http.StatusOK, ptr("text/plain"), "should not be read")})
	redirecting := newServer(t, map[string]http.HandlerFunc{
		"/away": redirect(func() string { return evil.url("evil.example", "/") }),
	})
	f := fetcher(t, 0)
	tests := []struct{ url, want string }{
		{evil.url("evil.example", "/"), "HOST_NOT_ALLOWED: evil.example:" + evil.port + " is not in the declared allowedHosts"},
		{redirecting.url("site.test", "/away"), "HOST_NOT_ALLOWED: evil.example:" + evil.port + " is not in the declared allowedHosts"},
		{"ftp://site.test/x", `HOST_NOT_ALLOWED: scheme "ftp" is not allowed (only http and https)`},
		{"http://user:pw@site.test:" + s.port + "/article", "HOST_NOT_ALLOWED: URLs with user info are not allowed"},
	}
	for _, tt := range tests {
		res, err := call(t, web.FetchURL(), obj{"url": tt.url}, &tool.Context{Fetch: f})
		require.ErrorIs(t, err, tool.ErrHostNotAllowed, tt.url)
		require.EqualError(t, err, tt.want, "the worker reports the denial verbatim")
		require.Equal(t, tool.Result{}, res)
	}
	require.Empty(t, evil.requests(), "the denied host was never contacted")
	require.Empty(t, s.requests())
}

func TestFetchURLConnectionFailure(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	u := s.url("site.test", "/")
	s.Close()
	_, err := call(t, web.FetchURL(), obj{"url": u}, &tool.Context{Fetch: fetcher(t, 0)})
	require.Error(t, err)
	_, denied := tool.DenialCode(err)
	require.False(t, denied)
	require.True(t, strings.HasPrefix(err.Error(), "fetch GET http://site.test:"+s.port+": "), err.Error())
}

func TestFetchURLCancelled(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, map[string]http.HandlerFunc{
		"/slow": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		},
	})
	t.Cleanup(func() { close(release) })
	cause := errors.New("cancelled: by request")
	ctx, cancel := context.WithCancelCause(ctxT(t))
	go func() {
		for len(s.requests()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel(cause)
	}()
	_, err := web.FetchURL().Execute(ctx, []byte(`{"url":"`+s.url("site.test", "/slow")+`"}`), &tool.Context{Fetch: fetcher(t, 0)})
	require.ErrorIs(t, err, cause)
}

func TestFetchURLWithoutNetwork(t *testing.T) {
	t.Parallel()
	for _, tc := range []*tool.Context{{}, nil} {
		res := mustCall(t, web.FetchURL(), obj{"url": "http://site.test/"}, tc)
		require.Equal(t, tool.Fail(tool.CodeNotAvailable, "Network capability not configured for this personality."), res)
	}
}
