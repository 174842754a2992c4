// Package toolimports defines an analyzer that keeps tool packages on the
// scoped accessors of tool.Context.
//
// A tool must reach the outside world only through tool.Context (Fetch, FS,
// Secrets, Process, KV), which the worker builds from the call's resolved
// capabilities. A tool package that imports os, net, net/http, os/exec or
// syscall could bypass those grants, so the analyzer reports every such
// import.
package toolimports

import (
	"flag"
	"go/ast"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

const doc = `report tool packages that import I/O packages directly

A tool package must reach the outside world only through the scoped
accessors in tool.Context (Fetch, FS, Secrets, Process, KV). The analyzer
reports every import of os, os/exec, os/signal, net, net/http (and its
subpackages), syscall or golang.org/x/sys/unix in a tool package. Pure
packages such as net/netip, net/url, io/fs and path/filepath are allowed.
Test files (_test.go) are exempt.

A package is a tool package when
  - its import path contains an internal/tools element pair
    (".../internal/tools" or ".../internal/tools/<group>"), or
  - one of its non-test files carries the comment //capstan:toolpackage, or
  - its import path is, or lies below, one of the -toolpkgs prefixes.`

// Analyzer reports imports of I/O packages (os, net, net/http, os/exec,
// syscall, ...) in tool packages. Its -toolpkgs flag takes comma-separated
// import path prefixes that name further tool packages; matching is on
// whole path elements.
var Analyzer = newAnalyzer()

// newAnalyzer returns an analyzer with its own -toolpkgs flag, so tests can
// configure one without touching the shared Analyzer.
func newAnalyzer() *analysis.Analyzer {
	var toolPkgs prefixFlag
	a := &analysis.Analyzer{
		Name: "toolimports",
		Doc:  doc,
		Run: func(pass *analysis.Pass) (any, error) {
			return nil, run(pass, toolPkgs.prefixes)
		},
	}
	a.Flags.Var(&toolPkgs, "toolpkgs",
		"comma-separated import path prefixes of extra tool packages (e.g. example.com/agent/tools)")
	return a
}

// run reports every forbidden import in the non-test files of pass's
// package when that package is a tool package.
func run(pass *analysis.Pass, prefixes []string) error {
	pkgPath := pass.Pkg.Path()
	if strings.HasSuffix(pkgPath, ".test") {
		return nil // the go command's generated test main, not tool code
	}
	var files []*ast.File
	for _, f := range pass.Files {
		if !isTestFile(pass, f) {
			files = append(files, f)
		}
	}
	if !isToolPackage(pkgPath, files, prefixes) {
		return nil
	}
	for _, f := range files {
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil || !isForbiddenImport(imp) {
				continue // a malformed path is the type checker's to report
			}
			pass.Report(analysis.Diagnostic{
				Pos: spec.Pos(),
				End: spec.End(),
				Message: "tool package " + pkgPath + " imports " + imp +
					": tools must use the scoped accessors in tool.Context (Fetch, FS, Secrets, Process, KV) instead",
			})
		}
	}
	return nil
}

// isToolPackage reports whether the package at pkgPath, with the given
// non-test files, is a tool package.
func isToolPackage(pkgPath string, files []*ast.File, prefixes []string) bool {
	if isToolPath(pkgPath) || matchesPrefix(pkgPath, prefixes) {
		return true
	}
	for _, f := range files {
		if hasMarker(f) {
			return true
		}
	}
	return false
}

// isTestFile reports whether f comes from a _test.go file.
func isTestFile(pass *analysis.Pass, f *ast.File) bool {
	tf := pass.Fset.File(f.FileStart)
	return tf != nil && strings.HasSuffix(tf.Name(), "_test.go")
}

// prefixFlag is a flag.Value holding the parsed -toolpkgs prefixes.
type prefixFlag struct {
	raw      string
	prefixes []string
}

var _ flag.Value = (*prefixFlag)(nil)

// String returns the flag's value as given.
func (f *prefixFlag) String() string { return f.raw }

// Set parses a comma-separated list of import path prefixes, replacing any
// earlier value.
func (f *prefixFlag) Set(value string) error {
	f.raw = value
	f.prefixes = parsePrefixes(value)
	return nil
}
