//go:build !unix

package main

import "os"

// tryLock: no advisory locks here; every local mode starts its own server.
func tryLock(*os.File) error { return nil }
