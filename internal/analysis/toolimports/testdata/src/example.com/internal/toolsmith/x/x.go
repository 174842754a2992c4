// Package x lives under internal/toolsmith, not internal/tools.
package x

import "os"

var _ = os.Getpid
