package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/stretchr/testify/require"
)

// TestExampleCallFilesAreValid keeps the shipped examples honest: every line
// is a call object naming a built-in tool and, if any, an example personality.
func TestExampleCallFilesAreValid(t *testing.T) {
	t.Parallel()
	var tools []string
	for _, tl := range builtin.All() {
		tools = append(tools, tl.Name)
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.jsonl"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			var c struct {
				Tool          string          `json:"tool"`
				PersonalityID string          `json:"personality_id"`
				Args          json.RawMessage `json:"args"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &c), "%s:%d", f, n)
			require.Contains(t, tools, c.Tool, "%s:%d", f, n)
			if c.PersonalityID != "" {
				_, err := os.Stat(filepath.Join("..", "..", "examples", "personalities", c.PersonalityID+".yaml"))
				require.NoError(t, err, "%s:%d names personality %s", f, n, c.PersonalityID)
			}
			require.False(t, slices.Contains([]string{"", "null"}, string(c.Args)), "%s:%d has no args", f, n)
		}
		require.NoError(t, sc.Err())
		require.NoError(t, fh.Close())
	}
}
