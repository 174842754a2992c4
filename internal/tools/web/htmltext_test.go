package web

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHTMLToText(t *testing.T) {
	t.Parallel()
	base, err := url.Parse("https://docs.test/guide/page.html?q=1")
	require.NoError(t, err)
	tests := []struct {
		name string
		html string
		want string
	}{
		{name: "empty", html: "", want: ""},
		{name: "fragment without body", html: "hello <b>world</b>", want: "hello world"},
		{name: "white space collapsed", html: "<p>  a \n\t b&nbsp;&nbsp;c  </p>", want: "a b c"},
		{name: "inline elements keep words apart or together", html: "<p><b>foo</b><i>bar</i> <span>baz</span></p>", want: "foobar baz"},
		{name: "paragraphs", html: "<p>one</p><p>two</p>", want: "one\n\ntwo"},
		{name: "divs are lines", html: "<div>one</div><div>two</div>", want: "one\ntwo"},
		{name: "headings", html: "<h1>T</h1><p>x</p><h3>Sub <em>part</em></h3>y", want: "# T\n\nx\n\n### Sub part\n\ny"},
		{name: "br", html: "a<br>b<br><br>c<br><br><br>d", want: "a\nb\n\nc\n\nd"},
		{name: "unordered list", html: "<p>x</p><ul><li>a</li><li>b <b>c</b></li></ul><p>y</p>", want: "x\n\n- a\n- b c\n\ny"},
		{name: "ordered list with start", html: `<ol start="3"><li>a</li><li>b</li></ol>`, want: "3. a\n4. b"},
		{name: "nested lists", html: "<ul><li>a<ol><li>b</li><li>c<ul><li>d</li></ul></li></ol></li><li>e</li></ul>", want: "- a\n  1. b\n  2. c\n    - d\n- e"},
		{name: "empty list item", html: "<ul><li></li><li>b</li></ul>", want: "- b"},
		{name: "table", html: "<table><caption>Cap</caption><tr><th>A</th><th>B</th></tr><tr><td>1</td><td></td><td>3</td></tr></table>", want: "Cap\nA | B\n1 | 3"},
		{name: "pre keeps white space", html: "<p>x</p><pre>\n  a  b\n\n\tc\n</pre><p>y</p>", want: "x\n\n  a  b\n\n\tc\n\ny"},
		{name: "entities", html: "<p>&lt;tag&gt; &amp; &eacute; &#x1F600;</p>", want: "<tag> & é \U0001F600"},
		{name: "relative link", html: `<a href="../other.html#s">Other</a>`, want: "[Other](https://docs.test/other.html#s)"},
		{name: "absolute link", html: `see <a href="https://x.test/a">this</a>.`, want: "see [this](https://x.test/a)."},
		{name: "link text is the URL", html: `<a href="https://x.test/a">https://x.test/a</a>`, want: "https://x.test/a"},
		{name: "link text is the URL without slash", html: `<a href="https://x.test/">https://x.test</a>!`, want: "https://x.test!"},
		{name: "fragment link", html: `<a href="#top">Top</a>`, want: "Top"},
		{name: "javascript link", html: `<a href=" JavaScript:alert(1)">Run</a>`, want: "Run"},
		{name: "data link", html: `<a href="data:text/html,x">D</a>`, want: "D"},
		{name: "link without href", html: `<a name="x">X</a>`, want: "X"},
		{name: "link without text", html: `a<a href="/x"><img src="i.png"></a>b`, want: "ab"},
		{name: "image link", html: `<a href="/x"><img src="i.png" alt="Logo"></a>`, want: "[Logo](https://docs.test/x)"},
		{name: "link over blocks", html: `<a href="/x"><div>A</div><div>B</div></a>`, want: "[A\nB](https://docs.test/x)"},
		{name: "link in list item", html: `<ul><li><a href="/x">A</a> and <a href="/y">B</a></li></ul>`, want: "- [A](https://docs.test/x) and [B](https://docs.test/y)"},
		{name: "base href", html: `<head><base href="https://cdn.test/root/"></head><a href="p">P</a>`, want: "[P](https://cdn.test/root/p)"},
		{name: "noise dropped", html: "<script>s</script><style>s</style><noscript>n</noscript><template>t</template><svg><text>s</text></svg><iframe>i</iframe><nav>n</nav><aside>a</aside><footer>f</footer><p>kept</p>", want: "kept"},
		{name: "hidden dropped", html: `<p hidden>h</p><p aria-hidden="TRUE">a</p><p style="color:red; display : none">s</p><div role="navigation">n</div><p>kept</p>`, want: "kept"},
		{name: "form controls dropped", html: `<form><label>Name</label><input value="v"><select><option>o</option></select><button>b</button><textarea>t</textarea></form>`, want: "Name"},
		{name: "main preferred", html: "<header>Site</header><main><p>Body</p></main><div>More</div>", want: "Body"},
		{name: "role main", html: `<div>Chrome</div><div role="main">Body</div>`, want: "Body"},
		{name: "empty main ignored", html: "<main> <script>x</script> </main><p>Body</p>", want: "Body"},
		{name: "single article preferred", html: "<div>Chrome</div><article><h2>A</h2><p>Body</p></article>", want: "## A\n\nBody"},
		{name: "several articles: whole body", html: "<div>Top</div><article>A</article><article>B</article>", want: "Top\nA\nB"},
		{name: "nested article counts once", html: "<div>Top</div><article>A<article>B</article></article>", want: "A\nB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := htmlToText(tt.html, base)
			require.Equal(t, tt.want, got.Text)
		})
	}
}

func TestHTMLToTextTitle(t *testing.T) {
	t.Parallel()
	p := htmlToText("<html><head><title>\n A  &amp; B </title></head><body><svg><title>icon</title></svg>x</body></html>", nil)
	require.Equal(t, page{Title: "A & B", Text: "x"}, p)
	p = htmlToText("<body><svg><title>icon</title></svg>x</body>", nil)
	require.Equal(t, page{Text: "x"}, p, "an svg title is not the page's")
	p = htmlToText(`<a href="/rel">R</a>`, nil)
	require.Equal(t, "[R](/rel)", p.Text, "without a base, links stay as written")
}

func TestHTMLToTextTooDeep(t *testing.T) {
	t.Parallel()
	// The parser refuses more than 512 open elements; the flat reading
	// still finds the text, and no noise.
	doc := "<title>Deep</title>" + strings.Repeat("<div><ul><li>", 400) + "deep <b>text</b><script>NOISE</script> " +
		strings.Repeat(`<a href="/x">l</a> `, 3) + `<embed src="x"><input value="v"><nav>NAV</nav><p>end</p>`
	p := htmlToText(doc, nil)
	require.Equal(t, page{Title: "Deep", Text: "deep text l l l\nend"}, p)
}

func TestHTMLToTextListIndentIsCapped(t *testing.T) {
	t.Parallel()
	p := htmlToText(strings.Repeat("<ul><li>x", 20), nil)
	lines := strings.Split(p.Text, "\n")
	require.Len(t, lines, 20)
	require.Equal(t, "- x", lines[0])
	require.Equal(t, strings.Repeat("  ", 8)+"- x", lines[19])
}

func FuzzHTMLToText(f *testing.F) {
	f.Add("<p>a<b>b</b></p><ul><li>x</li></ul>")
	f.Add(`<a href="javascript:x"><a href="/y">z</a></a><pre>a\n b</pre>`)
	f.Add("<table><tr><td>1<td>2</table><br><br>")
	base, _ := url.Parse("https://b.test/")
	f.Fuzz(func(t *testing.T, doc string) {
		p := htmlToText(doc, base)
		if strings.Contains(strings.ToLower(doc), "pre") {
			return // <pre> keeps its white space
		}
		if p.Text != strings.TrimRight(p.Text, " \t\n") || strings.HasPrefix(p.Text, "\n") {
			t.Fatalf("text starts with a line break or ends with white space: %q", p.Text)
		}
		if strings.Contains(p.Text, "\n\n\n") {
			t.Fatalf("more than one blank line in a row: %q", p.Text)
		}
	})
}
