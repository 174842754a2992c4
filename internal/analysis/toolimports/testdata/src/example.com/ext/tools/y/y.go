// Package y is a tool package only when -toolpkgs names example.com/ext/tools.
package y

import "os" // want `tool package example.com/ext/tools/y imports os: tools must use`

var _ = os.Getpid
