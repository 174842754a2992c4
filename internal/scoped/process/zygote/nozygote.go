//go:build !(linux && cgo)

// Package zygote is the fast path of the process sandbox, a fork server
// written in C; this build (without cgo) does not have it, and the runner
// starts every child through the launcher instead.
package zygote

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// Arg0 is argv[0] of the zygote; it names the mode.
const Arg0 = "capstan-sandbox-zygote"

// PoolSize is 0: this build has no zygote, and no pool.
const PoolSize = 0

// Available reports whether this binary has the zygote: false without cgo.
func Available() bool { return false }

// Request is one child to start (see the cgo build).
type Request struct {
	Path                          string
	Argv, Env                     []string
	Dir                           string
	NetNS, Proxy                  bool
	UID, GID, ProxyPort           int
	Tmp                           string
	TmpBytes                      int64
	TmpAccess                     uint64
	Ruleset                       *os.File
	Filter                        []unix.SockFilter
	CgroupV2                      *os.File
	CgroupsV1                     []string
	Status, Stdin, Stdout, Stderr *os.File
}

// errNoCgo is the error of every call in this build.
var errNoCgo = errors.New("zygote: this binary was built without cgo")

// Spawn fails: this build has no zygote.
func Spawn(Request) (int, error) { return 0, errNoCgo }

// Probe fails: this build has no zygote.
func Probe() error { return errNoCgo }
