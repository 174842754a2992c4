//capstan:toolpackage

// Package mytool is a user tool package, marked with the directive.
package mytool

import "os" // want `tool package example.com/agent/mytool imports os: tools must use`

var _ = os.Getpid
