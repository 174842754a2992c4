// Package good is a tool package that uses only I/O-free imports.
package good

import (
	"context"
	"io/fs"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
)

// Describe touches no outside world.
func Describe(_ context.Context, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	addr, _ := netip.ParseAddr("127.0.0.1")
	var mode fs.FileMode
	return strings.Join([]string{u.Host, addr.String(), filepath.Base(u.Path), mode.String()}, " "), nil
}
