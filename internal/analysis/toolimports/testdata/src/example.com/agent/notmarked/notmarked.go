//capstan:toolpackages is not the directive, and neither is this:
// see //capstan:toolpackage in the docs.

/* //capstan:toolpackage inside a block comment does not count either. */

// Package notmarked carries only look-alikes of the marker.
package notmarked

import "os"

var _ = os.Getpid
