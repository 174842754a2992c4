package mcphost

import (
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// conn is one live connection to a server: an initialized MCP session and,
// for a stdio server, its child process.
type conn struct {
	session *mcp.ClientSession
	// pid is a stdio server's process id (0 for a url server).
	pid int
	// values are the secret values this start resolved; they are redacted
	// from everything that comes from the server.
	values []string

	lost chan struct{} // closed by fail
	once sync.Once
	why  string // set before lost is closed

	// stop closes the session and ends the child (or the HTTP transport's
	// connections), and waits until nothing of them is left.
	stop      func()
	closeOnce sync.Once
}

func newConn() *conn { return &conn{lost: make(chan struct{})} }

// fail marks the connection lost with why (the first reason wins).
func (c *conn) fail(why string) {
	c.once.Do(func() {
		c.why = why
		close(c.lost)
	})
}

// close ends the connection for good; it is idempotent.
func (c *conn) close() {
	c.fail("closed by the worker")
	c.closeOnce.Do(func() {
		if c.stop != nil {
			c.stop()
		}
	})
}

// oneLine joins the lines of s with "; " (reasons are shown in one line).
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(lines, "; ")
}
