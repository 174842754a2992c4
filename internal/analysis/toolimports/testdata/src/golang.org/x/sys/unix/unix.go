// Package unix is a stub standing in for golang.org/x/sys/unix.
package unix
