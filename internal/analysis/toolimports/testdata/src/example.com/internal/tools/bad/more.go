package bad

import (
	_ "golang.org/x/sys/unix" // want `imports golang.org/x/sys/unix: tools must use`
	_ "io/fs"
	_ "net/http/httputil" // want `imports net/http/httputil: tools must use`
	hp "net/http/pprof"   // want `imports net/http/pprof: tools must use`
	_ "net/netip"
	. "os/signal" // want `imports os/signal: tools must use`
	_ "path/filepath"
)

var _ = hp.Index
var _ = Ignored
