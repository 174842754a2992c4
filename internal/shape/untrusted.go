package shape

import (
	"encoding/json"
	"regexp"
	"strings"
)

// StrippedToken replaces every chat-template token in untrusted output.
const StrippedToken = "[STRIPPED-TEMPLATE-TOKEN]"

// maxSourceChars caps the source attribute of the untrusted wrapper.
const maxSourceChars = 256

// The chat-template tokens of tools.md step 15, as regexp sources. The
// listed tokens match in any letter case; <|im_start|> takes the role word
// written right after it (<|im_start|>system) with it. The blank-line rule is
// case-sensitive: a blank line (a line break, optional spaces or tabs, a line
// break; at the very start of the text a leading empty line counts) followed
// by "Human:" or "Assistant:", the blank line included in the match.
const (
	templateTokens = `(?i:<\|im_start\|>(?:[a-z][a-z0-9_-]*)?` +
		`|<\|im_end\|>|<\|im_sep\|>|<\|begin_of_text\|>|<\|eot_id\|>` +
		`|<\|start_header_id\|>|<\|end_header_id\|>` +
		`|<<SYS>>|<</SYS>>|\[INST\]|\[/INST\]` +
		`|<start_of_turn>|<end_of_turn>|<bos>|<eos>|</s>|<s>)`
	blankLineAtStart = `\A[ \t]*\r?\n(?:Human|Assistant):`
	blankLine        = `\r?\n[ \t]*\r?\n(?:Human|Assistant):`
)

// mayStartToken reports whether a match of tokenAtRE can start at s[i]: a
// '<' or '[' followed by the next characters of some token, or a line break
// followed by optional spaces or tabs and a second line break.
func mayStartToken(s string, i int) bool {
	at := func(j int, set string) bool { return j < len(s) && strings.IndexByte(set, s[j]) >= 0 }
	switch s[i] {
	case '\r', '\n':
		j := i + 1
		if s[i] == '\r' {
			if !at(j, "\n") {
				return false
			}
			j++
		}
		for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
			j++
		}
		return at(j, "\r\n")
	case '<':
		switch {
		case at(i+1, "|<"):
			return true
		case at(i+1, "/"): // </s>
			return at(i+2, "sS")
		case at(i+1, "sS"): // <s>, <start_of_turn>
			return at(i+2, ">tT")
		case at(i+1, "eE"): // <eos>, <end_of_turn>
			return at(i+2, "oOnN")
		case at(i+1, "bB"): // <bos>
			return at(i+2, "oO")
		}
		return false
	case '[':
		return at(i+1, "/iI")
	}
	return false
}

// tokenAtStartRE and tokenAtRE are templateTokenRE anchored at the start of
// the text and at a later position. Every match of templateTokenRE starts at
// the start of the text or at a '<', '[', '\r' or '\n', and at such a
// position the anchored form picks the match templateTokenRE would.
var (
	tokenAtStartRE = regexp.MustCompile(`\A(?:` + templateTokens + `|` + blankLineAtStart + `|` + blankLine + `)`)
	tokenAtRE      = regexp.MustCompile(`\A(?:` + templateTokens + `|` + blankLine + `)`)
)

// untrustedTagRE matches the start of an <untrusted or </untrusted tag in any
// letter case.
var untrustedTagRE = regexp.MustCompile(`(?i)<(/?untrusted)`)

// StripTemplateTokens replaces every chat-template token in s by
// [StrippedToken]: <|im_start|> with an optional role word written right after
// it, <|im_end|>, <|im_sep|>, <|begin_of_text|>, <|eot_id|>,
// <|start_header_id|>, <|end_header_id|>, <<SYS>>, <</SYS>>, [INST], [/INST],
// <start_of_turn>, <end_of_turn>, <bos>, <eos>, </s> and <s> in any letter
// case, and a blank line followed by "Human:" or "Assistant:" (case-sensitive;
// the blank line is part of the match, so "a\n\nHuman: x" becomes
// "a[STRIPPED-TEMPLATE-TOKEN] x"). A blank line is a line break, optional
// spaces or tabs, and a line break (CR LF counts as one); an empty first line
// counts too. The result contains no such token.
func StripTemplateTokens(s string) string {
	// The regexp engine tries templateTokenRE at every byte; only the start
	// and the bytes a match can start with need trying.
	var b strings.Builder
	copied := 0
	for i := 0; i < len(s); {
		re := tokenAtRE
		if i == 0 {
			re = tokenAtStartRE
		}
		if i == 0 || mayStartToken(s, i) {
			if loc := re.FindStringIndex(s[i:]); loc != nil {
				if copied == 0 {
					b.Grow(len(s) + len(StrippedToken))
				}
				b.WriteString(s[copied:i])
				b.WriteString(StrippedToken)
				i += loc[1] // a match is never empty
				copied = i
				continue
			}
		}
		next := strings.IndexAny(s[i+1:], "<[\r\n")
		if next < 0 {
			break
		}
		i += 1 + next
	}
	if copied == 0 {
		return s
	}
	b.WriteString(s[copied:])
	return b.String()
}

// EscapeUntrustedTags replaces the '<' of every "<untrusted" and "</untrusted",
// in any letter case, by "&lt;", keeping the case of the rest:
// "<UnTrusted" becomes "&lt;UnTrusted".
func EscapeUntrustedTags(s string) string {
	return untrustedTagRE.ReplaceAllString(s, "&lt;${1}")
}

// WrapUntrusted returns the LLM-facing value of an ok result of a tool that
// declares output_is_untrusted:
//
//	<untrusted source="<source>" tool="<toolName>">
//	<body>
//	</untrusted>
//
// The body has its template tokens stripped, then its untrusted tags escaped.
// source (normally from [Source]) and toolName are sanitized the same way as
// in [Source] (quotes become ', < and > are dropped, CR/LF runs become one
// space), have template tokens stripped and are cut to 256 code points, so the
// result holds exactly one opening tag and ends with the only closing tag.
func WrapUntrusted(body, source, toolName string) string {
	body = EscapeUntrustedTags(StripTemplateTokens(body))
	var b strings.Builder
	b.Grow(len(body) + len(source) + len(toolName) + 48)
	b.WriteString(`<untrusted source="`)
	b.WriteString(attr(source))
	b.WriteString(`" tool="`)
	b.WriteString(attr(toolName))
	b.WriteString("\">\n")
	b.WriteString(body)
	b.WriteString("\n</untrusted>")
	return b.String()
}

// attr makes s safe as an attribute value of the wrapper.
func attr(s string) string {
	return capChars(StripTemplateTokens(cleanSource(s)), maxSourceChars)
}

// Source returns the source attribute of the untrusted wrapper for a call of
// toolName with args. For read_file it is "file:<path>", path being
// resolvedPath when non-empty, else the path argument. For every other tool it
// is the first of these that applies: the path argument (resolvedPath instead
// when non-empty), the url argument, "cmd:" + the command argument, "query:" +
// the query argument, or "unknown". An argument applies when it is present, a
// JSON string and not empty; args that are not a JSON object have no
// arguments. The result then has every " turned into ', every < and > removed,
// every run of CR and LF characters turned into one space, and is cut to at
// most 256 code points.
func Source(toolName string, args json.RawMessage, resolvedPath string) string {
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(args, &fields) // not an object: no arguments
	arg := func(key string) string {
		var s string
		if raw, ok := fields[key]; ok && json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	path := resolvedPath
	if path == "" {
		path = arg("path")
	}
	var src string
	switch {
	case toolName == "read_file" && path != "":
		src = "file:" + path
	case path != "":
		src = path
	case arg("url") != "":
		src = arg("url")
	case arg("command") != "":
		src = "cmd:" + arg("command")
	case arg("query") != "":
		src = "query:" + arg("query")
	default:
		src = "unknown"
	}
	return capChars(cleanSource(src), maxSourceChars)
}

// cleanSource turns " into ', drops < and >, and turns each run of CR/LF into
// one space.
func cleanSource(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	inBreak := false
	for _, r := range s {
		switch r {
		case '\r', '\n':
			if !inBreak {
				b.WriteByte(' ')
			}
			inBreak = true
			continue
		case '<', '>':
			continue // removed, so CR/LF on both sides form one run
		case '"':
			b.WriteByte('\'')
		default:
			b.WriteRune(r)
		}
		inBreak = false
	}
	return b.String()
}

// capChars cuts s to at most n code points.
func capChars(s string, n int) string {
	return s[:prefixBytes(s, n)]
}
