package file

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// MaxListedLines is how many line numbers an ambiguous patch_file error lists.
const MaxListedLines = 10

const patchFileSchema = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "file to patch; a relative path resolves against the working directory"},
    "old_text": {"type": "string", "minLength": 1, "description": "exact text to replace; must occur exactly once in the file"},
    "new_text": {"type": "string", "description": "replacement text (may be empty to delete old_text)"}
  },
  "required": ["path", "old_text", "new_text"],
  "additionalProperties": false
}`

type patchArgs struct {
	Path    string  `json:"path"`
	OldText string  `json:"old_text"`
	NewText *string `json:"new_text"`
}

// PatchFile returns the patch_file tool: it replaces the one occurrence of
// old_text in a file with new_text. Occurrences are counted at every start
// position, overlapping ones included ("aa" occurs twice in "aaa"), and
// compared byte for byte. After the STALE_WRITE check (see the package doc):
//
//   - exactly one occurrence: the file is rewritten, read back and its new
//     mtime recorded (as write_file does) → ok "Patched <abs>";
//   - none, but new_text (non-empty) occurs exactly once → ok "No change:
//     the patch is already applied at <abs>." (nothing is written);
//   - none otherwise → execution_failed "old_text not found in <abs>. Use
//     read_file to verify the exact content.";
//   - k > 1 → execution_failed "old_text matches <k> locations in <abs>
//     (lines a, b, …)." where the list holds the distinct 1-based line
//     numbers of the occurrences' starts in ascending order, separated by
//     ", ", at most MaxListedLines of them; when more lines have one, the
//     list ends with ", …" (U+2026). The word is always "lines".
func PatchFile() tool.Tool {
	return tool.Tool{
		Name:        PatchFileName,
		SideEffects: tool.SideEffectsExclusive,
		Description: "Replaces the single occurrence of old_text in a file with new_text. old_text must match the file " +
			"exactly (whitespace included) and occur once; fails with STALE_WRITE when the file changed since you last read it.",
		Schema:       json.RawMessage(patchFileSchema),
		Toolset:      Toolset,
		Capabilities: readWriteReach(),
		Execute:      tool.Typed(executePatch),
	}
}

func executePatch(ctx context.Context, a patchArgs, tc *tool.Context) (tool.Result, error) {
	switch {
	case a.Path == "":
		return tool.InvalidArguments("args.path is required and must not be empty"), nil
	case a.OldText == "":
		return tool.InvalidArguments("args.old_text is required and must not be empty"), nil
	case a.NewText == nil:
		return tool.InvalidArguments("args.new_text is required"), nil
	}
	if tc.FS == nil {
		return noFS(), nil
	}
	abs := absPath(tc, a.Path)
	if res, err := checkStale(ctx, tc, abs); res != nil || err != nil {
		return deref(res), err
	}
	data, _, err := tc.FS.ReadFile(ctx, abs)
	if err != nil {
		return fsFailure(ctx, "read", "read", abs, err)
	}
	content := string(data)
	m := findMatches(content, a.OldText)
	switch {
	case m.count == 1:
		patched := content[:m.first] + *a.NewText + content[m.first+len(a.OldText):]
		return writeVerified(ctx, tc, abs, []byte(patched), "Patched "+abs)
	case m.count == 0 && *a.NewText != "" && findMatches(content, *a.NewText).count == 1:
		return tool.OK("No change: the patch is already applied at " + abs + "."), nil
	case m.count == 0:
		return tool.Fail(tool.CodeExecutionFailed, "old_text not found in "+abs+". Use read_file to verify the exact content."), nil
	}
	return tool.Fail(tool.CodeExecutionFailed, "old_text matches "+strconv.Itoa(m.count)+" locations in "+abs+
		" (lines "+m.lineList()+")."), nil
}

// matches are the occurrences of a text in a file.
type matches struct {
	count int
	// first is the byte offset of the first occurrence.
	first int
	// lines are the distinct 1-based lines of the occurrences' starts, at
	// most MaxListedLines+1 of them (one more tells that the list is cut).
	lines []int
}

// findMatches counts the occurrences of sub (non-empty) in s, overlapping
// ones included.
func findMatches(s, sub string) matches {
	m := matches{first: -1}
	line, seen := 1, 0 // line is the line of byte offset seen
	for i := 0; i <= len(s); {
		j := strings.Index(s[i:], sub)
		if j < 0 {
			break
		}
		at := i + j
		if m.count == 0 {
			m.first = at
		}
		m.count++
		if len(m.lines) <= MaxListedLines {
			line += strings.Count(s[seen:at], "\n")
			seen = at
			if len(m.lines) == 0 || m.lines[len(m.lines)-1] != line {
				m.lines = append(m.lines, line)
			}
		}
		i = at + 1
	}
	return m
}

// lineList renders the listed lines: "a, b, c", or the first
// MaxListedLines followed by ", …" when there are more.
func (m matches) lineList() string {
	shown := m.lines[:min(len(m.lines), MaxListedLines)]
	parts := make([]string, len(shown))
	for i, l := range shown {
		parts[i] = strconv.Itoa(l)
	}
	s := strings.Join(parts, ", ")
	if len(m.lines) > MaxListedLines {
		s += ", …"
	}
	return s
}
