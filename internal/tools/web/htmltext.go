package web

import (
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// page is an HTML document reduced for reading.
type page struct {
	// Title is the document's <title>, white space collapsed ("" if none).
	Title string
	// Text is the readable text (see htmlToText).
	Text string
}

// htmlToText parses doc (UTF-8) with golang.org/x/net/html, the HTML5
// parsing algorithm browsers use, and renders its readable text:
//
//   - Content: the first <main> (or role="main") with text, else the only
//     <article>, else the whole <body>.
//   - Dropped: <head> (its <title> becomes page.Title), script, style,
//     noscript, template, svg, math, canvas, iframe, object, embed, nav,
//     aside, footer, form controls (button, input, select, textarea), and
//     any element that is hidden (the hidden attribute,
//     aria-hidden="true", an inline display:none) or has role navigation,
//     banner, contentinfo, complementary or search.
//   - Layout: white space collapsed except in <pre>; blocks on their own
//     lines, paragraphs, headings, lists and tables separated by a blank
//     line; headings prefixed "# " to "###### "; list items "- " (or
//     "<n>. " in <ol>), indented two spaces per nesting level (at most 8
//     levels); table cells separated by " | "; <br> a line break; images
//     replaced by their alt text.
//   - Links: "[text](url)" with the href resolved against base (and a
//     <base href>); fragment-only, javascript: and data: links, and links
//     whose text is the URL itself, are shown as their text.
//
// A document the parser refuses (elements nested more than 512 deep) is
// read by flatText instead.
func htmlToText(doc string, base *url.URL) page {
	root, err := html.Parse(strings.NewReader(doc))
	if err != nil { // elements nested too deep (more than 512 open)
		return flatText(doc)
	}
	var p page
	if t := find(root, func(n *html.Node) bool { return n.DataAtom == atom.Title }); t != nil {
		p.Title = strings.Join(strings.Fields(textOf(t)), " ")
	}
	if b := find(root, func(n *html.Node) bool { return n.DataAtom == atom.Base && attr(n, "href") != "" }); b != nil && base != nil {
		if u, err := base.Parse(attr(b, "href")); err == nil {
			base = u
		}
	}
	r := &renderer{base: base, linkAt: -1}
	r.children(mainContent(root))
	p.Text = string(r.b)
	return p
}

// mainContent picks the node whose children hold the readable text.
func mainContent(root *html.Node) *html.Node {
	isMain := func(n *html.Node) bool {
		return (n.DataAtom == atom.Main || attr(n, "role") == "main") && hasText(n)
	}
	if m := find(root, isMain); m != nil {
		return m
	}
	var articles []*html.Node
	walk(root, func(n *html.Node) bool {
		if n.DataAtom == atom.Article {
			articles = append(articles, n)
			return false // an article nested in another is part of it
		}
		return true
	})
	if len(articles) == 1 && hasText(articles[0]) {
		return articles[0]
	}
	if b := find(root, func(n *html.Node) bool { return n.DataAtom == atom.Body }); b != nil {
		return b
	}
	return root
}

// walk calls visit on every element below n in document order, except
// inside skipped elements; it does not descend into an element for which
// visit returns false.
func walk(n *html.Node, visit func(*html.Node) bool) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || skipped(c) {
			continue
		}
		if visit(c) {
			walk(c, visit)
		}
	}
}

// find returns the first element below n (in document order, outside
// skipped elements, <head> included) for which match is true, or nil.
func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || (skipped(c) && c.DataAtom != atom.Head) {
			continue
		}
		if match(c) {
			return c
		}
		if f := find(c, match); f != nil {
			return f
		}
	}
	return nil
}

// textOf returns the concatenated text nodes below n.
func textOf(n *html.Node) string {
	var b strings.Builder
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if c.Type == html.TextNode {
				b.WriteString(c.Data)
			}
			rec(c)
		}
	}
	rec(n)
	return b.String()
}

// hasText reports whether a text node outside skipped elements below n
// holds more than white space.
func hasText(n *html.Node) bool {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		switch {
		case c.Type == html.TextNode && strings.TrimSpace(c.Data) != "":
			return true
		case c.Type == html.ElementNode && !skipped(c) && hasText(c):
			return true
		}
	}
	return false
}

// attr returns the value of n's attribute key (lower case) or "".
func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && a.Key == key {
			return a.Val
		}
	}
	return ""
}

// noise are the elements dropped with everything inside them.
var noise = map[atom.Atom]bool{
	atom.Head: true, atom.Script: true, atom.Style: true, atom.Noscript: true,
	atom.Template: true, atom.Svg: true, atom.Math: true, atom.Canvas: true,
	atom.Iframe: true, atom.Object: true, atom.Embed: true, atom.Nav: true,
	atom.Aside: true, atom.Footer: true, atom.Button: true, atom.Input: true,
	atom.Select: true, atom.Textarea: true, atom.Dialog: true,
}

// noiseRoles are ARIA roles dropped like noise elements.
var noiseRoles = map[string]bool{
	"navigation": true, "banner": true, "contentinfo": true, "complementary": true, "search": true,
}

// skipped reports whether element n and its content are left out.
func skipped(n *html.Node) bool {
	if noise[n.DataAtom] || n.Namespace != "" { // svg and math content
		return true
	}
	for _, a := range n.Attr {
		switch {
		case a.Namespace != "":
		case a.Key == "hidden":
			return true
		case a.Key == "aria-hidden" && strings.EqualFold(strings.TrimSpace(a.Val), "true"):
			return true
		case a.Key == "role" && noiseRoles[strings.ToLower(strings.TrimSpace(a.Val))]:
			return true
		case a.Key == "style" && strings.Contains(strings.ToLower(strings.Join(strings.Fields(a.Val), "")), "display:none"):
			return true
		}
	}
	return false
}

// paragraphs are the elements set off by a blank line.
var paragraphs = map[atom.Atom]bool{
	atom.P: true, atom.Pre: true, atom.Blockquote: true, atom.Table: true,
	atom.Figure: true, atom.Hr: true, atom.Address: true, atom.Dl: true,
	atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true, atom.H5: true, atom.H6: true,
}

// lines are the elements that start and end a line.
var lines = map[atom.Atom]bool{
	atom.Div: true, atom.Section: true, atom.Article: true, atom.Header: true,
	atom.Main: true, atom.Li: true, atom.Dt: true, atom.Dd: true, atom.Tr: true,
	atom.Caption: true, atom.Figcaption: true, atom.Details: true, atom.Summary: true,
	atom.Form: true, atom.Fieldset: true, atom.Legend: true, atom.Center: true,
	atom.Tbody: true, atom.Thead: true, atom.Tfoot: true, atom.Option: true,
}

// renderer writes the readable text of a DOM. Line breaks and separators are
// owed, not written, until the next word, so the text never starts or ends
// with white space and never holds more than one blank line in a row
// (except inside <pre>).
type renderer struct {
	b    []byte
	base *url.URL

	newlines int    // line breaks owed before the next word
	space    bool   // a space owed before the next word on the same line
	sep      string // a cell separator owed instead of the space
	marker   string // a heading or list marker owed at the start of the next line
	openLink bool   // "[" owed before the next word
	linkAt   int    // index of the "[" written for the current link; -1 if none

	pre   int   // depth of <pre>
	lists []int // next item number per open list; 0 for <ul>
}

// brk owes n line breaks (1: a new line, 2: a blank line).
func (r *renderer) brk(n int) { r.newlines = max(r.newlines, n) }

// flush writes what is owed before a word.
func (r *renderer) flush() {
	atStart := len(r.b) == 0 || r.newlines > 0
	switch {
	case len(r.b) == 0:
	case r.newlines > 0:
		r.b = append(r.b, strings.Repeat("\n", r.newlines)...)
	case r.sep != "":
		r.b = append(r.b, r.sep...)
	case r.space:
		r.b = append(r.b, ' ')
	}
	if atStart {
		r.b = append(r.b, r.marker...)
		r.marker = ""
	}
	r.newlines, r.space, r.sep = 0, false, ""
	if r.openLink {
		r.linkAt = len(r.b)
		r.b = append(r.b, '[')
		r.openLink = false
	}
}

// word writes one word, or one line of <pre> text.
func (r *renderer) word(s string) {
	r.flush()
	r.b = append(r.b, s...)
}

// text writes a text node.
func (r *renderer) text(s string) {
	if r.pre > 0 {
		for i, line := range strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") {
			if i > 0 && len(r.b) > 0 {
				r.newlines++
			}
			if line != "" {
				r.word(line)
			}
		}
		return
	}
	if s == "" {
		return
	}
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	if unicode.IsSpace(first) {
		r.space = true
	}
	for i, f := range strings.Fields(s) {
		if i > 0 {
			r.space = true
		}
		r.word(f)
	}
	if unicode.IsSpace(last) {
		r.space = true
	}
}

// children renders the children of n.
func (r *renderer) children(n *html.Node) {
	cell := 0
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		switch c.Type {
		case html.TextNode:
			r.text(c.Data)
		case html.ElementNode:
			if skipped(c) {
				continue
			}
			if c.DataAtom == atom.Td || c.DataAtom == atom.Th {
				if cell > 0 && r.newlines == 0 {
					r.sep = " | "
				}
				cell++
			}
			r.element(c)
		}
	}
}

// element renders element n.
func (r *renderer) element(n *html.Node) {
	switch a := n.DataAtom; {
	case a == atom.Br:
		if len(r.b) > 0 {
			r.newlines = min(r.newlines+1, 2)
		}
	case a == atom.Img:
		if alt := strings.Join(strings.Fields(attr(n, "alt")), " "); alt != "" {
			r.text(alt)
		}
	case a == atom.A:
		r.link(n)
	case a == atom.Ul || a == atom.Ol || a == atom.Menu:
		r.list(n)
	case a == atom.Li:
		r.item(n)
	case headingLevel(a) > 0:
		r.brk(2)
		r.marker = strings.Repeat("#", headingLevel(a)) + " "
		r.children(n)
		r.marker = ""
		r.brk(2)
	case a == atom.Pre:
		r.brk(2)
		r.pre++
		r.children(n)
		r.pre--
		r.brk(2)
	case paragraphs[a]:
		r.brk(2)
		r.children(n)
		r.brk(2)
	case lines[a]:
		r.brk(1)
		r.children(n)
		r.brk(1)
	default:
		r.children(n)
	}
}

// headingLevel is 1 to 6 for h1 to h6, else 0.
func headingLevel(a atom.Atom) int {
	switch a {
	case atom.H1:
		return 1
	case atom.H2:
		return 2
	case atom.H3:
		return 3
	case atom.H4:
		return 4
	case atom.H5:
		return 5
	case atom.H6:
		return 6
	}
	return 0
}

// list renders <ul>, <ol> or <menu>.
func (r *renderer) list(n *html.Node) {
	next := 0
	if n.DataAtom == atom.Ol {
		next = 1
		if s, err := strconv.Atoi(strings.TrimSpace(attr(n, "start"))); err == nil && s > 0 && s < 1e6 {
			next = s
		}
	}
	if len(r.lists) == 0 {
		r.brk(2)
	} else {
		r.brk(1)
	}
	r.lists = append(r.lists, next)
	r.children(n)
	r.lists = r.lists[:len(r.lists)-1]
	if len(r.lists) == 0 {
		r.brk(2)
	} else {
		r.brk(1)
	}
}

// maxIndent is the deepest list indentation, in levels of two spaces.
const maxIndent = 8

// item renders <li>.
func (r *renderer) item(n *html.Node) {
	r.brk(1)
	depth := len(r.lists)
	bullet := "- "
	if depth > 0 && r.lists[depth-1] > 0 {
		bullet = strconv.Itoa(r.lists[depth-1]) + ". "
		r.lists[depth-1]++
	}
	r.marker = strings.Repeat("  ", min(max(depth-1, 0), maxIndent)) + bullet
	r.children(n)
	r.marker = ""
	r.brk(1)
}

// link renders <a> as "[text](url)", or as its text alone (see htmlToText).
func (r *renderer) link(n *html.Node) {
	target := r.href(attr(n, "href"))
	if target == "" || r.openLink || r.linkAt >= 0 { // nested links only in broken trees
		r.children(n)
		return
	}
	r.openLink = true
	r.children(n)
	r.openLink = false
	if r.linkAt < 0 {
		return // no text: nothing was written
	}
	at := r.linkAt
	r.linkAt = -1
	if text := string(r.b[at+1:]); strings.TrimSuffix(text, "/") == strings.TrimSuffix(target, "/") {
		r.b = append(r.b[:at], r.b[at+1:]...) // the text is the URL: drop the "["
		return
	}
	r.b = append(r.b, "]("+target+")"...)
}

// href resolves a link target for display: "" when it is missing, only a
// fragment, or a javascript:, data: or vbscript: URL.
func (r *renderer) href(h string) string {
	h = strings.TrimSpace(h)
	if h == "" || strings.HasPrefix(h, "#") {
		return ""
	}
	u, err := url.Parse(h)
	if err != nil {
		return ""
	}
	if r.base != nil {
		u = r.base.ResolveReference(u)
	}
	switch strings.ToLower(u.Scheme) {
	case "javascript", "data", "vbscript":
		return ""
	}
	return u.String()
}

// flatKept are the noise elements flatText does not count: <head> (its
// script and style are counted themselves) and void elements, which have
// no end tag and hold no text.
var flatKept = map[atom.Atom]bool{atom.Head: true, atom.Input: true, atom.Embed: true}

// flatText is the degraded reading of a document the parser refuses: the
// tokenizer's text outside noise elements, each element of paragraphs and
// lines (and <br>, <li>) starting a new line, white space collapsed.
func flatText(doc string) page {
	z := html.NewTokenizer(strings.NewReader(doc))
	r := &renderer{linkAt: -1}
	var p page
	skip, inTitle := 0, false
	for {
		switch tt := z.Next(); tt {
		case html.ErrorToken:
			p.Text = string(r.b)
			return p
		case html.TextToken:
			switch {
			case inTitle && p.Title == "":
				p.Title = strings.Join(strings.Fields(string(z.Text())), " ")
			case skip == 0 && !inTitle:
				r.text(string(z.Text()))
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Title:
				inTitle = true
			case noise[a] && !flatKept[a] && tt == html.StartTagToken:
				skip++
			case paragraphs[a] || lines[a] || a == atom.Br || a == atom.Li:
				r.brk(1)
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Title:
				inTitle = false
			case noise[a] && !flatKept[a] && skip > 0:
				skip--
			case paragraphs[a] || lines[a]:
				r.brk(1)
			}
		}
	}
}
