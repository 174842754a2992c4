// Package plain is ordinary user code: it may use os.
package plain

import "os"

var _ = os.Getpid
