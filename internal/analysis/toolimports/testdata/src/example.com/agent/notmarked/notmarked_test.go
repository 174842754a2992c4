//capstan:toolpackage

// A marker in a test file does not make the package a tool package.
package notmarked

import "os"

var _ = os.Getenv
