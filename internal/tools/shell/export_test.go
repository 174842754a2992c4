package shell

import (
	"time"

	"github.com/capstanhq/capstan/tool"
)

// TerminalEvery returns the terminal tool reporting progress every d.
func TerminalEvery(d time.Duration) tool.Tool { return terminal(d) }

// ProgressInterval is the interval Terminal reports progress at.
func ProgressInterval() time.Duration { return progressInterval }
