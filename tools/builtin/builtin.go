// Package builtin lists Capstan's built-in tools (docs/tools.md): the file,
// web, shell and memory tools and echo. A worker binary hosts them all with
// All, or a few of them with Select:
//
//	tools, err := builtin.Select("read_file", "echo")
package builtin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/internal/tools/memory"
	"github.com/capstanhq/capstan/internal/tools/shell"
	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
)

// All returns every built-in tool, in a stable order. Each call returns new
// values: a caller may change them.
func All() []tool.Tool {
	var all []tool.Tool
	all = append(all, file.Tools()...)
	all = append(all, web.Tools()...)
	all = append(all, shell.Tools()...)
	all = append(all, memory.Tools()...)
	return append(all, echo.Tool())
}

// Names returns the name of every built-in tool, in the order of All.
func Names() []string {
	all := All()
	names := make([]string, len(all))
	for i, t := range all {
		names[i] = t.Name
	}
	return names
}

// ByName returns the built-in tool called name, and false when there is none.
func ByName(name string) (tool.Tool, bool) {
	for _, t := range All() {
		if t.Name == name {
			return t, true
		}
	}
	return tool.Tool{}, false
}

// Select returns the built-in tools named, in the order given. A name that
// is no built-in tool, or that is given twice, is an error naming it and
// listing the built-in tools.
func Select(names ...string) ([]tool.Tool, error) {
	tools := make([]tool.Tool, 0, len(names))
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			return nil, fmt.Errorf("builtin: tool %q is named twice", n)
		}
		t, ok := ByName(n)
		if !ok {
			return nil, fmt.Errorf("builtin: no built-in tool is named %q (the built-in tools are %s)", n, strings.Join(Names(), ", "))
		}
		tools = append(tools, t)
	}
	return tools, nil
}
