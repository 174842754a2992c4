// Command weather-worker is a Capstan worker that hosts the built-in tools
// and the weather tool: everything cmd/worker does, configured the same way
// (CAPSTAN_* variables, docs/operations.md).
package main

import (
	"github.com/capstanhq/capstan/examples/weather"
	"github.com/capstanhq/capstan/workercmd"
)

func main() { workercmd.Main(weather.Tool()) }
