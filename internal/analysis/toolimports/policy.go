package toolimports

import (
	"go/ast"
	"strings"
)

// marker is the directive that makes any package a tool package. It must
// stand alone on its own line comment (optionally followed by a space and
// free text), in a non-test file of the package.
const marker = "//capstan:toolpackage"

// forbiddenExact are import paths a tool package may not import: each one
// reaches the outside world (files, network, processes, signals) without
// going through a scoped accessor.
var forbiddenExact = map[string]bool{
	"os":                    true,
	"os/exec":               true,
	"os/signal":             true,
	"net":                   true,
	"net/http":              true,
	"syscall":               true,
	"golang.org/x/sys/unix": true,
}

// forbiddenTrees are import path prefixes whose whole subtree is forbidden
// (net/http/httputil, net/http/httptest, net/http/pprof, ...).
var forbiddenTrees = []string{
	"net/http/",
}

// isForbiddenImport reports whether a tool package may not import path.
// Pure, I/O-free neighbours such as net/netip, net/url, io/fs and
// path/filepath are allowed.
func isForbiddenImport(path string) bool {
	if forbiddenExact[path] {
		return true
	}
	for _, tree := range forbiddenTrees {
		if strings.HasPrefix(path, tree) {
			return true
		}
	}
	return false
}

// isToolPath reports whether the import path names a built-in tool package:
// it has an internal/tools path element pair, either as the last two
// elements or followed by more (".../internal/tools/echo").
func isToolPath(path string) bool {
	p := "/" + path // treat a path that starts with internal/tools like one that contains it
	return strings.HasSuffix(p, "/internal/tools") || strings.Contains(p, "/internal/tools/")
}

// matchesPrefix reports whether path equals one of prefixes or lies below
// one of them. Matching is on whole path elements, so the prefix
// "example.com/foo" matches "example.com/foo/bar" but not
// "example.com/foobar".
func matchesPrefix(path string, prefixes []string) bool {
	for _, prefix := range prefixes {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

// parsePrefixes splits a comma-separated -toolpkgs value into clean
// prefixes: blanks are dropped, and a trailing "/..." or "/" is removed so
// "example.com/tools/..." means the same as "example.com/tools".
func parsePrefixes(value string) []string {
	var prefixes []string
	for _, field := range strings.Split(value, ",") {
		p := strings.TrimSpace(field)
		p = strings.TrimSuffix(p, "...")
		p = strings.TrimRight(p, "/")
		if p != "" {
			prefixes = append(prefixes, p)
		}
	}
	return prefixes
}

// hasMarker reports whether file carries the //capstan:toolpackage
// directive in any of its comments.
func hasMarker(file *ast.File) bool {
	for _, group := range file.Comments {
		for _, c := range group.List {
			if isMarker(c.Text) {
				return true
			}
		}
	}
	return false
}

// isMarker reports whether the raw text of one comment is the marker
// directive, alone or followed by a space or tab and free text.
func isMarker(text string) bool {
	rest, ok := strings.CutPrefix(text, marker)
	if !ok {
		return false
	}
	return rest == "" || rest[0] == ' ' || rest[0] == '\t'
}
