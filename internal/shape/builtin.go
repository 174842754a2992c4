package shape

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// Limits of the built-in reducers, in lines (segments separated by "\n").
const (
	// ReadFileMaxLines is the number of lines read_file shows without a range.
	ReadFileMaxLines = 200
	// TerminalHeadLines and TerminalTailLines are the lines of terminal output
	// the terminal reducer keeps at each end.
	TerminalHeadLines = 100
	TerminalTailLines = 100
)

// readFileHeaderRE matches the first line of an unranged read_file value,
// "[<abs>] <N> lines".
var readFileHeaderRE = regexp.MustCompile(`^\[.*\] [0-9]+ lines$`)

// ReadFileReducer is the reducer of the built-in read_file tool. An ok result
// of a call without a range (no non-null start_line or end_line argument)
// whose value has the form "[<abs>] <N> lines\n\n<content>" and whose content
// has more than 200 lines (segments separated by "\n") becomes
//
//	File is <N> lines. Showing lines 1-200. Call read_file with start_line/end_line for more.
//	<the first 200 lines>
//
// where N is the number of lines of the content; the header line is dropped.
// Every other result is returned unchanged. Structured and CostUSD are kept.
func ReadFileReducer(res tool.Result, args json.RawMessage, _ *tool.Context) tool.Result {
	if !res.OK || hasRange(args) {
		return res
	}
	header, content, ok := strings.Cut(res.Value, "\n\n")
	if !ok || !readFileHeaderRE.MatchString(header) {
		return res
	}
	n := strings.Count(content, "\n") + 1
	if n <= ReadFileMaxLines {
		return res
	}
	res.Value = "File is " + strconv.Itoa(n) + " lines. Showing lines 1-" + strconv.Itoa(ReadFileMaxLines) +
		". Call read_file with start_line/end_line for more.\n" + firstLines(content, ReadFileMaxLines)
	return res
}

// hasRange reports whether read_file args ask for a line range.
func hasRange(args json.RawMessage) bool {
	var a struct {
		StartLine json.RawMessage `json:"start_line"`
		EndLine   json.RawMessage `json:"end_line"`
	}
	if json.Unmarshal(args, &a) != nil {
		return false
	}
	set := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	return set(a.StartLine) || set(a.EndLine)
}

// TerminalReducer is the reducer of the built-in terminal tool: it keeps the
// head and tail of long output. A value (ok result) or error message (failed
// result) of more than 200 lines (segments separated by "\n") keeps its first
// 100 and last 100 lines with the line "... [<k> lines omitted] ..." between
// them, k being the number of lines dropped. Shorter text, Structured and
// CostUSD are kept as they are.
func TerminalReducer(res tool.Result, _ json.RawMessage, _ *tool.Context) tool.Result {
	if res.OK {
		res.Value = headTail(res.Value)
	} else {
		res.Error = headTail(res.Error)
	}
	return res
}

// headTail keeps the first TerminalHeadLines and last TerminalTailLines lines
// of s when it has more than their sum.
func headTail(s string) string {
	n := strings.Count(s, "\n") + 1
	if n <= TerminalHeadLines+TerminalTailLines {
		return s
	}
	omitted := n - TerminalHeadLines - TerminalTailLines
	return firstLines(s, TerminalHeadLines) + "\n... [" + strconv.Itoa(omitted) + " lines omitted] ...\n" +
		lastLines(s, TerminalTailLines)
}

// firstLines returns the first n lines of s, without the line break after
// the last one.
func firstLines(s string, n int) string {
	end := 0
	for range n {
		i := strings.IndexByte(s[end:], '\n')
		if i < 0 {
			return s
		}
		end += i + 1
	}
	return s[:end-1]
}

// lastLines returns the last n lines of s, without the line break before the
// first one.
func lastLines(s string, n int) string {
	start := len(s)
	for range n {
		i := strings.LastIndexByte(s[:start], '\n')
		if i < 0 {
			return s
		}
		start = i
	}
	return s[start+1:]
}
