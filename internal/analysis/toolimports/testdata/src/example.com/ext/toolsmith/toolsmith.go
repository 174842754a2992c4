// Package toolsmith shares a string prefix with example.com/ext/tools but is
// not below it.
package toolsmith

import "os"

var _ = os.Getpid
