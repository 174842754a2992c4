//go:build linux && cgo

// Package zygote is the fast path of the process sandbox: a fork server
// that starts confined children without running the Go runtime in them.
//
// The process runner's portable path (package launcher) runs the worker
// binary again for every child, and the Go runtime's start-up and the
// binary's package initialisation dominate the cost of a short command. The
// zygote instead is the worker binary started once, in zygote mode, by
// Start: an ELF constructor (zygote.c) sees argv[0] equal to Arg0 and
// descriptor 3 open on a socket, and serves spawn requests there before the
// Go runtime ever starts. For each request it clones itself (clone3 with
// CLONE_PARENT, so the child is the worker's to wait for, and
// CLONE_INTO_CGROUP into the call's cgroup v2), and the child, a small
// single-threaded C process, joins the call's cgroup v1 hierarchies,
// unshares a user and network namespace of its own (and a mount namespace,
// for a child whose TMPDIR is a tmpfs), maps its ids to themselves, brings
// loopback up, listens for the egress proxy and sends the socket back,
// mounts the tmpfs on its TMPDIR and sends its root back, takes its
// standard streams, sets no_new_privs, drops every capability, restricts
// itself with the Landlock ruleset (plus a rule for the tmpfs) and installs
// the seccomp filter the worker built (launcher.Ruleset, launcher.Filter),
// and executes the binary. It reports a failed step on the status channel in
// the launcher's format, so the runner reads both paths with
// launcher.Await.
//
// Once a request with NetNS and Tmp came, the zygote keeps PoolSize
// children forked ahead of demand that have done what no request decides:
// each closed every descriptor but its channel to the zygote, took a
// process group of its own, unshared a user, network and mount namespace
// (ids mapped to themselves, loopback up) at the lowest priority, and
// waits. Such a request is handed to the oldest: the zygote gives it its
// priority back, moves it into the call's cgroups (v2 and v1) and forwards
// the request; the child does the rest (listener, tmpfs, streams, no
// capabilities, Landlock, seccomp) and executes the binary. A pool child
// serves one request and sees no other (it was forked before its request
// came, and the zygote wipes each request's buffers); it exits when the
// zygote does, and the zygote exits when the worker closes the socket or
// dies. A pool child that cannot be handed over (dead, refused by a
// cgroup) is killed and the request served by a fresh clone; after three
// such failures in a row the pool stops. Pool children are this process's
// own children, like every child: the zygote announces each (born,
// discarded), and Spawn reaps the discarded and, when the zygote is gone,
// the rest.
//
// The zygote is built only with cgo (it is C); Available reports whether
// this binary has it. It holds nothing of the worker: it starts with an
// empty environment and /dev/null for its streams, in a process group of
// its own, and exits when the worker closes the socket (or dies).
package zygote

/*
#include "zygote.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// Arg0 is argv[0] of the zygote; it names the mode.
const Arg0 = C.ZY_ARG0

// PoolSize is how many children the zygote keeps forked ahead of demand,
// in a user, network and mount namespace of their own, once a request
// with NetNS and Tmp came (a child from the pool skips those steps).
const PoolSize = C.ZY_POOL_SIZE

// Available reports whether this binary has the zygote: true in a cgo
// build on Linux.
func Available() bool { return true }

// Request is one child to start.
type Request struct {
	// Path is the binary, absolute; Argv its argv (Argv[0] included).
	Path string
	Argv []string
	// Env is the whole environment of the child.
	Env []string
	// Dir is the child's working directory, absolute.
	Dir string
	// NetNS starts the child in a user and network namespace of its own,
	// mapping UID and GID to themselves; Proxy also listens on
	// 127.0.0.1:ProxyPort there and sends the socket on Status.
	NetNS, Proxy bool
	UID, GID     int
	ProxyPort    int
	// Tmp, when set, is the child's TMPDIR, on which it mounts a tmpfs of
	// TmpBytes bytes in a mount namespace of its own and sends an O_PATH
	// descriptor of its root on Status (launcher.Spec.Tmp); needs NetNS.
	// With a Ruleset, TmpAccess (launcher.TmpAccess) is what the ruleset
	// grants the tmpfs's root.
	Tmp       string
	TmpBytes  int64
	TmpAccess uint64
	// Ruleset, when not nil, is the Landlock ruleset the child restricts
	// itself with (launcher.Ruleset).
	Ruleset *os.File
	// Filter, when not empty, is the seccomp filter the child installs
	// (launcher.Filter).
	Filter []unix.SockFilter
	// CgroupV2, when not nil, is the cgroup v2 directory the child starts
	// in; CgroupsV1 are cgroup v1 directories it joins first.
	CgroupV2  *os.File
	CgroupsV1 []string
	// Status is the child's end of the launcher status channel;
	// Stdin, Stdout and Stderr its standard streams.
	Status, Stdin, Stdout, Stderr *os.File
}

// server is the running zygote.
type server struct {
	mu   sync.Mutex // one request at a time; guards what follows
	conn *os.File
	cmd  *exec.Cmd
	dead bool // the zygote exited: it is reaped and replaced
	// pool holds the pids of the zygote's pool children not handed over
	// (ZY_POOL_BORN): this process's children, reaped when the zygote is
	// gone; discarded ones await their reaping (ZY_POOL_GONE).
	pool, discarded map[int]bool
}

var (
	current   *server
	currentMu sync.Mutex
)

// errGone reports a zygote that exited.
var errGone = errors.New("zygote: the fork server is gone")

// Spawn starts r's child through this process's zygote, started at the
// first call (and again if it exited), and returns the child's pid: the
// caller's own child, which it must wait for. An error is the zygote's
// failure to create the process (an errno from clone3, or a request it
// refused); a failure of the child's confinement steps or of execve comes
// on r.Status instead.
func Spawn(r Request) (int, error) {
	for attempt := 0; ; attempt++ {
		s, err := get()
		if err != nil {
			return 0, err
		}
		pid, err := s.spawn(r)
		if errors.Is(err, errGone) && attempt == 0 {
			continue
		}
		return pid, err
	}
}

// Probe starts the zygote if it is not running and checks it answers.
func Probe() error {
	_, err := get()
	return err
}

func get() (*server, error) {
	currentMu.Lock()
	defer currentMu.Unlock()
	if current != nil {
		current.mu.Lock()
		dead := current.dead
		current.mu.Unlock()
		if !dead {
			return current, nil
		}
		current = nil
	}
	s, err := start()
	if err != nil {
		return nil, err
	}
	current = s
	return s, nil
}

// start runs this binary in zygote mode.
func start() (*server, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("zygote: socket pair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote-child")
	c := exec.Command("/proc/self/exe")
	c.Args = []string{Arg0}
	c.Env = []string{}
	c.Dir = "/"
	c.ExtraFiles = []*os.File{theirs}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = c.Start()
	_ = theirs.Close()
	if err != nil {
		_ = ours.Close()
		return nil, fmt.Errorf("zygote: start: %w", err)
	}
	return &server{conn: ours, cmd: c, pool: map[int]bool{}, discarded: map[int]bool{}}, nil
}

// spawn sends one request and reads its reply.
func (s *server) spawn(r Request) (int, error) {
	h, payload, files, err := encode(r)
	if err != nil {
		return 0, err
	}
	memfd, err := unix.MemfdCreate("capstan-spawn", unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("zygote: memfd: %w", err)
	}
	mem := os.NewFile(uintptr(memfd), "capstan-spawn")
	defer mem.Close()
	if _, err := mem.Write(payload); err != nil {
		return 0, fmt.Errorf("zygote: write the request: %w", err)
	}
	rights := []int{int(mem.Fd())}
	for _, f := range files {
		rights = append(rights, int(f.Fd()))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return 0, errGone
	}
	if err := unix.Sendmsg(int(s.conn.Fd()), h, unix.UnixRights(rights...), nil, 0); err != nil {
		if errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) {
			return 0, s.gone()
		}
		return 0, fmt.Errorf("zygote: send: %w", err)
	}
	s.reapDiscarded()
	for {
		kind, pid, e, err := s.receive()
		if err != nil {
			return 0, err
		}
		switch kind {
		case C.ZY_POOL_BORN:
			s.pool[pid] = true
		case C.ZY_POOL_GONE:
			delete(s.pool, pid)
			s.discarded[pid] = true
		case C.ZY_REPLY:
			if e != 0 {
				return 0, fmt.Errorf("zygote: %w", syscall.Errno(e))
			}
			// A pool child handed over is the caller's to wait for.
			delete(s.pool, pid)
			return pid, nil
		default:
			return 0, fmt.Errorf("zygote: message of unknown kind %d", kind)
		}
	}
}

// receive reads one message of the zygote; s.mu is held. At the end of
// the socket the zygote is gone (errGone).
func (s *server) receive() (kind, pid int, errno syscall.Errno, err error) {
	var rep [C.sizeof_struct_zy_reply]byte
	for {
		n, _, _, _, err := unix.Recvmsg(int(s.conn.Fd()), rep[:], nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, 0, fmt.Errorf("zygote: receive: %w", err)
		}
		if n == 0 {
			return 0, 0, 0, s.gone()
		}
		if n != len(rep) {
			return 0, 0, 0, fmt.Errorf("zygote: short message of %d bytes", n)
		}
		word := func(i int) int32 { return int32(binary.NativeEndian.Uint32(rep[4*i:])) }
		return int(word(0)), int(word(1)), syscall.Errno(word(2)), nil
	}
}

// reapDiscarded reaps the discarded pool children that have exited; s.mu
// is held.
func (s *server) reapDiscarded() {
	for pid := range s.discarded {
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid || (err != nil && err != unix.EINTR) {
			delete(s.discarded, pid)
		}
	}
}

// gone marks the zygote dead and reaps it and its pool children (which
// exit when it does; they are killed to be sure: being this process's
// unreaped children, their pids name no other process); s.mu is held.
func (s *server) gone() error {
	s.dead = true
	// Notices still queued name pool children too.
	var rep [C.sizeof_struct_zy_reply]byte
	for {
		n, _, _, _, err := unix.Recvmsg(int(s.conn.Fd()), rep[:], nil, unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != len(rep) {
			break
		}
		if pid := int(int32(binary.NativeEndian.Uint32(rep[4:]))); pid > 0 {
			switch int32(binary.NativeEndian.Uint32(rep[0:])) {
			case C.ZY_POOL_BORN:
				s.pool[pid] = true
			case C.ZY_POOL_GONE:
				delete(s.pool, pid)
				s.discarded[pid] = true
			}
		}
	}
	_ = s.conn.Close()
	_ = s.cmd.Wait()
	for pid := range s.pool {
		_ = unix.Kill(pid, unix.SIGKILL)
		s.discarded[pid] = true
	}
	clear(s.pool)
	for pid := range s.discarded {
		var ws unix.WaitStatus
		for {
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != unix.EINTR {
				break
			}
		}
	}
	clear(s.discarded)
	return errGone
}

// encode lays r out as the protocol of zygote.h: the header, the payload
// and the descriptors after the memfd.
func encode(r Request) (header, payload []byte, files []*os.File, err error) {
	if len(r.Argv) == 0 {
		return nil, nil, nil, errors.New("zygote: empty argv")
	}
	var flags uint32
	files = []*os.File{r.Status, r.Stdin, r.Stdout, r.Stderr}
	if r.NetNS {
		flags |= C.ZY_NETNS
	}
	if r.Proxy {
		if !r.NetNS {
			return nil, nil, nil, errors.New("zygote: a proxy needs a network namespace")
		}
		flags |= C.ZY_PROXY
	}
	var tmpOpts string
	if r.Tmp != "" {
		if !r.NetNS || r.TmpBytes <= 0 || !strings.HasPrefix(r.Tmp, "/") {
			return nil, nil, nil, errors.New("zygote: a tmpfs needs a network namespace, a positive size and an absolute path")
		}
		if r.Ruleset != nil && r.TmpAccess == 0 {
			return nil, nil, nil, errors.New("zygote: a tmpfs under Landlock needs its access rights")
		}
		flags |= C.ZY_TMPFS
		tmpOpts = launcher.TmpOptions(r.TmpBytes)
	} else {
		r.TmpAccess = 0
	}
	if r.Ruleset != nil {
		flags |= C.ZY_LANDLOCK
		files = append(files, r.Ruleset)
	}
	if len(r.Filter) > 0 {
		flags |= C.ZY_SECCOMP
	}
	if r.CgroupV2 != nil {
		flags |= C.ZY_CGROUP2
		files = append(files, r.CgroupV2)
	}
	for _, f := range files[:4] {
		if f == nil {
			return nil, nil, nil, errors.New("zygote: status and standard streams are required")
		}
	}
	var b strings.Builder
	for _, s := range [][]string{{r.Path, r.Dir, r.Tmp, tmpOpts}, r.Argv, r.Env, r.CgroupsV1} {
		for _, item := range s {
			if strings.IndexByte(item, 0) >= 0 {
				return nil, nil, nil, fmt.Errorf("zygote: %q contains NUL", item)
			}
			b.WriteString(item)
			b.WriteByte(0)
		}
	}
	payload = []byte(b.String())
	if len(r.Filter) > 0 {
		for len(payload)%8 != 0 {
			payload = append(payload, 0)
		}
		raw := unsafe.Slice((*byte)(unsafe.Pointer(&r.Filter[0])), len(r.Filter)*int(unsafe.Sizeof(r.Filter[0])))
		payload = append(payload, raw...)
	}
	hdr := C.struct_zy_header{
		magic: C.ZY_MAGIC, flags: C.uint32_t(flags), uid: C.uint32_t(r.UID), gid: C.uint32_t(r.GID),
		proxy_port: C.uint32_t(r.ProxyPort), argc: C.uint32_t(len(r.Argv)), envc: C.uint32_t(len(r.Env)),
		ncgroups: C.uint32_t(len(r.CgroupsV1)), nfilter: C.uint32_t(len(r.Filter)), payload: C.uint32_t(len(payload)),
		tmp_access: C.uint64_t(r.TmpAccess),
	}
	header = C.GoBytes(unsafe.Pointer(&hdr), C.int(unsafe.Sizeof(hdr)))
	return header, payload, files, nil
}
