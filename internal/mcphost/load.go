package mcphost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// LoadError lists every problem of the definitions of a directory, each
// naming its file: a worker with an invalid definition does not start.
type LoadError struct {
	// Problems are "<file>: <message>" lines, by file name then in
	// document order.
	Problems []string
}

// Error returns the problems, one per line.
func (e *LoadError) Error() string {
	return "CAPSTAN_MCP_SERVERS_DIR has invalid MCP server definitions:\n  " + strings.Join(e.Problems, "\n  ")
}

// LoadDir reads every *.yaml and *.yml file of dir (not its
// subdirectories), one definition each, and returns them sorted by server
// name. maxTimeout is
// the worker's call timeout (see Parse). Any invalid file, and two files
// naming the same server, make it return a *LoadError with every problem of
// every file. An empty dir yields no definitions and no error.
func LoadDir(dir string, maxTimeout time.Duration) ([]*Definition, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("CAPSTAN_MCP_SERVERS_DIR: %w", err)
	}
	var defs []*Definition
	var problems []string
	seen := map[string]string{}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		d, probs := Parse(data, maxTimeout)
		for _, p := range probs {
			problems = append(problems, file+": "+p.Message)
		}
		if d == nil {
			continue
		}
		if other, dup := seen[d.Name]; dup {
			problems = append(problems, fmt.Sprintf("%s: name: server %q is also defined in %s", file, d.Name, other))
			continue
		}
		seen[d.Name] = file
		d.File = file
		defs = append(defs, d)
	}
	if len(problems) > 0 {
		return nil, &LoadError{Problems: problems}
	}
	slices.SortFunc(defs, func(a, b *Definition) int { return strings.Compare(a.Name, b.Name) })
	return defs, nil
}

// ErrInvalid is matched by a *LoadError.
var ErrInvalid = errors.New("invalid MCP server definitions")

// Is matches ErrInvalid.
func (e *LoadError) Is(target error) bool { return target == ErrInvalid }
