package bad

import (
	"os"
	"testing"
)

// Tests may use os for fixtures: no report here.
func TestRun(t *testing.T) {
	_ = os.Getenv("HOME")
}
