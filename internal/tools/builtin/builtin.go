// Package builtin lists Capstan's built-in tools.
package builtin

import (
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/internal/tools/file"
	"github.com/capstanhq/capstan/internal/tools/memory"
	"github.com/capstanhq/capstan/internal/tools/shell"
	"github.com/capstanhq/capstan/internal/tools/web"
	"github.com/capstanhq/capstan/tool"
)

// All returns every built-in tool, in a stable order.
func All() []tool.Tool {
	var all []tool.Tool
	all = append(all, file.Tools()...)
	all = append(all, web.Tools()...)
	all = append(all, shell.Tools()...)
	all = append(all, memory.Tools()...)
	return append(all, echo.Tool())
}
