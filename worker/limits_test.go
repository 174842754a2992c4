package worker_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Limits a reader can see at once (docs/architecture.md, "The worker's
// rooms"): in worker/ and below, no type has more than maxMethods methods
// and no function is longer than maxFuncLines lines. Test files are exempt.
const (
	maxMethods   = 30
	maxFuncLines = 80
)

// TestRoomLimits fails when a type of worker/... gathers more than
// maxMethods methods or a function runs past maxFuncLines lines: a room
// asking to be split.
func TestRoomLimits(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	methods := map[string][]string{} // "dir.Type" -> methods
	var problems []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if fn.Recv != nil && len(fn.Recv.List) == 1 {
				recv := receiverType(fn.Recv.List[0].Type)
				key := filepath.Dir(path) + "." + recv
				methods[key] = append(methods[key], name)
				name = recv + "." + name
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			if n := end - start + 1; n > maxFuncLines {
				problems = append(problems, fmt.Sprintf("%s: func %s is %d lines (at most %d)", fset.Position(fn.Pos()), name, n, maxFuncLines))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for typ, ms := range methods {
		if len(ms) > maxMethods {
			problems = append(problems, fmt.Sprintf("type %s has %d methods (at most %d)", typ, len(ms), maxMethods))
		}
	}
	if len(problems) > 0 {
		t.Errorf("rooms asking to be split:\n  %s", strings.Join(problems, "\n  "))
	}
}

// receiverType is the name of a method's receiver type, without pointer
// or type parameters.
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}
