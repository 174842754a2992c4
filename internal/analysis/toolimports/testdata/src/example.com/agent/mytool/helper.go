package mytool

import "net/http" // want `tool package example.com/agent/mytool imports net/http: tools must use`

// The marker in one file makes the whole package a tool package.
var _ = http.MethodGet
