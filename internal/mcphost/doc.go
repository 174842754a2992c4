// Package mcphost hosts the tools of MCP servers in a worker (docs/mcp.md):
// the MCP client side of Capstan, built on the official Go SDK.
//
// Definitions (LoadDir, Parse) come from CAPSTAN_MCP_SERVERS_DIR, one server
// per file: a stdio command or a streamable HTTP URL, and a capability
// declaration in the categories of a built-in tool's. A Host starts every
// server, lists its tools and hosts each as a tool.Tool named
// mcp__<server>__<tool> whose capabilities are the server's declaration, so
// every gate of the worker's pipeline applies to it unchanged.
//
// What a hosted server can reach is its declaration, whoever calls it:
//
//   - a stdio server is a child started by the process accessor's machinery
//     (internal/scoped/process): no shell, a clean environment plus env and
//     the resolved secret_env, Landlock to the declared fs_reach, its own
//     network namespace with the declared hosts reachable only through an
//     egress proxy (internal/scoped/egress) that applies the fetch accessor's
//     checks, the seccomp filter, its own cgroup (killed with it);
//   - a url server is reached only through the scoped fetch dialer
//     (internal/scoped/fetch) under the declared hosts: private, loopback
//     and cloud-metadata addresses are refused after resolution, no proxy
//     from the environment, no redirects; secret_headers are injected at
//     egress by the fetch accessor's machinery (fetch.Injector), only into
//     requests for the host of the URL.
//
// Since a server serves every personality, a personality may call its tools
// only when its own policy covers the whole declaration
// (capability.ValidateTool), and a url server's tools only when its
// secrets.send_to binds the refs of secret_headers to the server's host
// (Host.CheckSendTo); the worker applies both.
//
// A server that exits, closes its connection or fails two pings in a row is
// restarted (at once after a healthy run, with doubling backoff in a crash
// loop); meanwhile its tools answer not_available, and a call in flight at
// the crash returns an infrastructure fault (tool.ErrUnavailable) so that the
// worker redelivers it. Secret values the server was given are redacted from
// everything that comes back from it: results, errors, progress, stderr
// lines logged, tool descriptions and schemas.
package mcphost
