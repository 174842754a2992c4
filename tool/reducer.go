package tool

import "encoding/json"

// Reducer condenses the result of one tool before secret redaction and the
// budget trim. The worker runs the reducer registered for a tool on ok and
// error results alike, with the call's (validated) args and its Context; a
// reducer that panics leaves the original result. A Reducer must be
// deterministic, must not mutate res.Structured in place, and must make no
// network calls or other I/O: it is a pure function of its inputs.
type Reducer func(res Result, args json.RawMessage, c *Context) Result
