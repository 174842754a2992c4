// Command capstan-vet runs Capstan's static checks: today the toolimports
// analyzer, which keeps tool packages on the scoped accessors of
// tool.Context.
//
// Usage:
//
//	go run ./cmd/capstan-vet ./...
//	go run ./cmd/capstan-vet -toolpkgs=example.com/agent/tools ./...
//
// It exits 0 when clean, 3 when it reports findings and 1 when the packages
// cannot be loaded or analysed. The built binary also works as a vet tool:
// go vet -vettool=$(command -v capstan-vet) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/capstanhq/capstan/internal/analysis/toolimports"
)

func main() {
	singlechecker.Main(toolimports.Analyzer)
}
