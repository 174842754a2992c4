// Package builtin lists Capstan's built-in tools.
package builtin

import (
	"github.com/capstanhq/capstan/internal/tools/echo"
	"github.com/capstanhq/capstan/tool"
)

// All returns every built-in tool, in a stable order.
func All() []tool.Tool {
	return []tool.Tool{echo.Tool()}
}
