// Package pipeline holds the steps a worker takes a tool call through that
// need no NATS: the tool's view of the call, the gates that depend only on
// the tool, the personality and the call (toolset, permissions, arguments,
// capabilities), the scoped accessors of a resolved grant, running the
// tool (panics and errors made results), and shaping its result (reducer,
// secret redaction, budget trim, untrusted wrap, size limit). Package
// worker runs them between its own steps (cancellation, rate limits,
// leases, publishing); package tooltest runs them without a worker, so a
// tool's tests see what the worker would do.
package pipeline
