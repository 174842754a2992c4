package toolimports

import (
	"go/parser"
	"go/token"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestAnalyzer(t *testing.T) {
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), Analyzer,
		"example.com/internal/tools",       // root of the tools tree
		"example.com/internal/tools/bad",   // forbidden imports; _test.go files exempt
		"example.com/internal/tools/good",  // only allowed imports
		"example.com/agent/mytool",         // marked user package
		"example.com/agent/plain",          // ordinary package may use os
		"example.com/agent/notmarked",      // marker look-alikes, marker only in a test file
		"example.com/internal/toolsmith/x", // internal/tools must be whole path elements
		"example.com/ext/toolsmith",        // not a tool package without -toolpkgs
	)
}

func TestAnalyzerToolPkgsFlag(t *testing.T) {
	t.Parallel()
	a := newAnalyzer()
	if err := a.Flags.Set("toolpkgs", " example.com/other , example.com/ext/tools/... "); err != nil {
		t.Fatalf("set -toolpkgs: %v", err)
	}
	analysistest.Run(t, analysistest.TestData(), a,
		"example.com/ext/tools/y",   // below a prefix: reported
		"example.com/ext/toolsmith", // shares only a string prefix: not reported
		"example.com/agent/plain",   // unrelated: not reported
	)
}

func TestAnalyzerIsValid(t *testing.T) {
	t.Parallel()
	if err := analysis.Validate([]*analysis.Analyzer{Analyzer}); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if Analyzer.Name != "toolimports" {
		t.Fatalf("Name = %q, want toolimports", Analyzer.Name)
	}
	if Analyzer.Flags.Lookup("toolpkgs") == nil {
		t.Fatal("Analyzer has no -toolpkgs flag")
	}
}

func TestIsForbiddenImport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want bool
	}{
		{"os", true},
		{"os/exec", true},
		{"os/signal", true},
		{"net", true},
		{"net/http", true},
		{"net/http/httputil", true},
		{"net/http/httptest", true},
		{"syscall", true},
		{"golang.org/x/sys/unix", true},
		{"net/netip", false},
		{"net/url", false},
		{"io/fs", false},
		{"path/filepath", false},
		{"io", false},
		{"context", false},
		{"github.com/capstanhq/capstan/tool", false},
		{"example.com/os", false},
		{"net/httpx", false},
		{"osx", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := isForbiddenImport(tt.path); got != tt.want {
				t.Fatalf("isForbiddenImport(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestIsToolPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		path string
		want bool
	}{
		{"tools root", "github.com/capstanhq/capstan/internal/tools", true},
		{"tool group", "github.com/capstanhq/capstan/internal/tools/echo", true},
		{"nested group", "github.com/capstanhq/capstan/internal/tools/web/fetch", true},
		{"relative root", "internal/tools", true},
		{"relative group", "internal/tools/echo", true},
		{"other internal", "github.com/capstanhq/capstan/internal/scoped", false},
		{"toolsmith", "example.com/internal/toolsmith", false},
		{"not internal", "example.com/tools/echo", false},
		{"myinternal", "example.com/myinternal/tools", false},
		{"public tool contract", "github.com/capstanhq/capstan/tool", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := isToolPath(tt.path); got != tt.want {
				t.Fatalf("isToolPath(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestPrefixes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		flag  string
		path  string
		want  bool
		count int
	}{
		{"empty flag", "", "example.com/tools", false, 0},
		{"exact", "example.com/tools", "example.com/tools", true, 1},
		{"below", "example.com/tools", "example.com/tools/x/y", true, 1},
		{"string prefix only", "example.com/tools", "example.com/toolsmith", false, 1},
		{"dots suffix", "example.com/tools/...", "example.com/tools/x", true, 1},
		{"trailing slash", "example.com/tools/", "example.com/tools/x", true, 1},
		{"second of two", "a.com/x, example.com/tools", "example.com/tools/x", true, 2},
		{"blanks dropped", " , ,example.com/tools,", "example.com/other", false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prefixes := parsePrefixes(tt.flag)
			if len(prefixes) != tt.count {
				t.Fatalf("parsePrefixes(%q) = %q, want %d prefixes", tt.flag, prefixes, tt.count)
			}
			if got := matchesPrefix(tt.path, prefixes); got != tt.want {
				t.Fatalf("matchesPrefix(%q, %q) = %v, want %v", tt.path, prefixes, got, tt.want)
			}
		})
	}
}

func TestHasMarker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want bool
	}{
		{"above package", "//capstan:toolpackage\n\npackage p\n", true},
		{"in doc comment", "// Package p does things.\n//capstan:toolpackage\npackage p\n", true},
		{"with trailing text", "//capstan:toolpackage built-in style\npackage p\n", true},
		{"after package clause", "package p\n\n//capstan:toolpackage\nvar x int\n", true},
		{"no marker", "// Package p.\npackage p\n", false},
		{"space after slashes", "// capstan:toolpackage\npackage p\n", false},
		{"longer word", "//capstan:toolpackages\npackage p\n", false},
		{"mentioned mid-comment", "// see //capstan:toolpackage\npackage p\n", false},
		{"block comment", "/*capstan:toolpackage*/\npackage p\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := parser.ParseFile(token.NewFileSet(), "p.go", tt.src, parser.ParseComments)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got := hasMarker(f); got != tt.want {
				t.Fatalf("hasMarker(%q) = %v, want %v", tt.src, got, tt.want)
			}
		})
	}
}
