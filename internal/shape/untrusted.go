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

// templateTokenRE matches the chat-template tokens of tools.md step 15. The
// listed tokens match in any letter case; <|im_start|> takes the role word
// written right after it (<|im_start|>system) with it. The blank-line rule is
// case-sensitive: a blank line (a line break, optional spaces or tabs, a line
// break; at the very start of the text a leading empty line counts) followed
// by "Human:" or "Assistant:", the blank line included in the match.
var templateTokenRE = regexp.MustCompile(
	`(?i:<\|im_start\|>(?:[a-z][a-z0-9_-]*)?` +
		`|<\|im_end\|>|<\|im_sep\|>|<\|begin_of_text\|>|<\|eot_id\|>` +
		`|<\|start_header_id\|>|<\|end_header_id\|>` +
		`|<<SYS>>|<</SYS>>|\[INST\]|\[/INST\]` +
		`|<start_of_turn>|<end_of_turn>|<bos>|<eos>|</s>|<s>)` +
		`|(?:\A|\r?\n)[ \t]*\r?\n(?:Human|Assistant):`)

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
	return templateTokenRE.ReplaceAllLiteralString(s, StrippedToken)
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
