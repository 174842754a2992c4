package mcphost

import "testing"

// Rogue builds testdata/rogue once and returns its path (for the external
// tests).
func Rogue(t *testing.T) string { return rogue(t) }
