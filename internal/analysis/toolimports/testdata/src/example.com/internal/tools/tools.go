// Package tools is the root of the built-in tools tree; it counts too.
package tools

import "os" // want `tool package example.com/internal/tools imports os: tools must use`

var _ = os.Getpid
