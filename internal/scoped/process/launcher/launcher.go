// Package launcher confines a child process before the child's own binary
// runs: cgroups, a loopback-only network namespace, the egress proxy's
// listener, capabilities, Landlock and a seccomp filter, in that order.
//
// The process runner does not start a confined child directly. It runs the
// current binary again (Self, /proc/self/exe) in launcher mode: argv[0] is
// Arg0, argv[1] the encoded Spec, argv[2] the absolute path of the binary to
// run and argv[3:] that binary's argv; file descriptor 3 is the launcher's
// end of a unix SOCK_SEQPACKET socket pair, its status channel. When the
// Spec asks for a network namespace, the runner starts the launcher in a
// new user and network namespace (Cloneflags); the launcher brings the
// namespace's loopback interface up. In launcher mode the process then
//
//  1. joins the cgroup v1 hierarchies the Spec names (cgroup v2 is entered
//     at clone time by the runner);
//  2. brings loopback up and, for a child with network, listens on
//     127.0.0.1:ProxyPort inside the namespace and sends that listening
//     socket to the runner over the status channel (the runner serves the
//     call's egress proxy on it);
//  3. when the Spec bounds the child's TMPDIR (Spec.Tmp; the runner then
//     also starts the launcher in a mount namespace of its own,
//     MountNSAttr), makes every mount a slave of the host's, mounts a
//     tmpfs of Spec.TmpBytes over the TMPDIR and sends a descriptor of its
//     root to the runner over the status channel (TmpFull tells from it,
//     after the child exited, whether the child filled it);
//  4. sets no_new_privs and drops every capability (bounding, ambient,
//     permitted, effective and inheritable sets; securebits keep a root
//     child from regaining them at execve);
//  5. applies the Spec's Landlock ruleset, which the runner built
//     (Ruleset) and passed as descriptor 4, with a rule for the tmpfs of
//     step 3 added (TmpAccess);
//  6. installs the seccomp filter (Filter);
//  7. execve(2)s the binary with the environment it was given.
//
// So the binary starts confined and shares no Go runtime state with the
// worker. When any step fails the launcher writes the error to the status
// channel and exits with status 126 (127 when the binary does not exist);
// the runner reads the channel with Await. With argv[1] "check" the
// launcher exits 0 at once (Check); with argv[1] "probe" and argv[2] a Spec
// it runs steps 1 to 6 and exits 0 (Probe), which tells the runner whether
// this machine allows them.
//
// Importing this package installs the hook: an init function that, in
// launcher mode, never returns. The process package imports it, so every
// binary that links the worker (the capstan worker, a user's own worker
// binary, a `go test` binary) handles launcher mode before its main runs.
// Launcher mode needs both argv[0] equal to Arg0 and descriptor 3 open on a
// socket, so an ordinary invocation never enters it. Nothing of the
// worker's environment reaches the launcher: it runs with the child's
// environment. The steps run on the main thread, which is locked to the
// init goroutine and is the thread that calls execve, so per-thread state
// (capabilities, the seccomp filter) is the binary's.
package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg0 is argv[0] of a launcher process; it names the mode.
const Arg0 = "capstan-sandbox-launcher"

// Self is the binary the runner starts in launcher mode: the running
// binary itself, even when its file was replaced or removed since it
// started.
const Self = "/proc/self/exe"

// ProxyPort is the port of the egress proxy inside a child's network
// namespace: the child reaches it at 127.0.0.1:ProxyPort, the only TCP
// port Landlock lets it connect to.
const ProxyPort = 3128

// Descriptors of a launcher: the status channel, and the Landlock ruleset
// when the Spec asks for Landlock.
const (
	statusFD  = 3
	rulesetFD = 4
)

// specVersion is the version of the Spec encoding; a launcher refuses any
// other, so a worker and a launcher built from different sources never
// misread each other.
const specVersion = 2

// Exit statuses of a launcher that could not run the binary, as a shell
// reports them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// Net is what a child may do on the network.
type Net string

// The network modes of a Spec.
const (
	// NetNone denies every socket that could leave the child: in its own
	// network namespace it has loopback only, Landlock refuses TCP bind and
	// connect (UDP too from ABI 10) and the seccomp filter refuses IPv4 and
	// IPv6 sockets altogether.
	NetNone Net = ""
	// NetProxy lets the child connect to the egress proxy only: it runs in
	// its own network namespace and Landlock allows TCP connect to
	// 127.0.0.1:ProxyPort alone.
	NetProxy Net = "proxy"
	// NetHost leaves TCP and UDP unrestricted (CAPSTAN_PROCESS_NETWORK=
	// unconfined on a machine without user namespaces).
	NetHost Net = "host"
)

// Spec is the confinement of one child. Every path must be absolute and
// clean; a path that does not exist when the launcher runs is skipped. A
// path naming a file grants that file only.
type Spec struct {
	// Version is set by Args; a Spec with another version is refused.
	Version int `json:"v"`
	// Landlock applies a Landlock ruleset built from Read, Write and Net;
	// without it Read and Write are ignored.
	Landlock bool `json:"landlock,omitempty"`
	// Read lists hierarchies the child may read, list and execute.
	Read []string `json:"read,omitempty"`
	// Write lists hierarchies the child may read, execute, create, write,
	// truncate, rename, link and remove in.
	Write []string `json:"write,omitempty"`
	// Net is the network mode.
	Net Net `json:"net,omitempty"`
	// NetNS says the launcher runs in a user and network namespace of its
	// own (the runner's Cloneflags): it brings loopback up.
	NetNS bool `json:"netns,omitempty"`
	// Seccomp installs the filter of Filter(Net != NetNone).
	Seccomp bool `json:"seccomp,omitempty"`
	// Cgroups lists cgroup v1 directories the launcher joins first, so the
	// child and everything it starts is under their limits.
	Cgroups []string `json:"cgroups,omitempty"`
	// Tmp, when set, is the child's private TMPDIR, which the launcher
	// turns into a tmpfs of TmpBytes bytes (at least one page) in a mount
	// namespace of its own: writing past it fails with ENOSPC. It needs
	// NetNS (the user namespace) and the runner's MountNSAttr.
	Tmp      string `json:"tmp,omitempty"`
	TmpBytes int64  `json:"tmp_bytes,omitempty"`
}

// validate reports a Spec the launcher would refuse.
func (s Spec) validate() error {
	if s.Version != specVersion {
		return fmt.Errorf("spec version %d, want %d", s.Version, specVersion)
	}
	for _, list := range [][]string{s.Read, s.Write, s.Cgroups} {
		for _, p := range list {
			if err := checkPath(p); err != nil {
				return err
			}
		}
	}
	if s.Tmp != "" || s.TmpBytes != 0 {
		if err := checkPath(s.Tmp); err != nil {
			return fmt.Errorf("tmp %w", err)
		}
		if s.TmpBytes <= 0 {
			return fmt.Errorf("tmp size %d must be positive", s.TmpBytes)
		}
		if !s.NetNS {
			return errors.New("tmp needs a user namespace")
		}
	}
	switch s.Net {
	case NetNone, NetHost:
	case NetProxy:
		if !s.NetNS {
			return errors.New("net proxy needs a network namespace")
		}
	default:
		return fmt.Errorf("unknown net mode %q", s.Net)
	}
	return nil
}

func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q must be absolute and clean", p)
	}
	return nil
}

// encode returns the Spec's argv form, with the current version.
func (s Spec) encode() (string, error) {
	s.Version = specVersion
	if err := s.validate(); err != nil {
		return "", fmt.Errorf("launcher: %w", err)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("launcher: encode spec: %w", err)
	}
	return string(b), nil
}

// decodeSpec is the inverse of encode.
func decodeSpec(text string) (Spec, error) {
	var s Spec
	dec := json.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, fmt.Errorf("launcher: decode spec: %w", err)
	}
	if dec.More() {
		return Spec{}, errors.New("launcher: decode spec: trailing data")
	}
	if err := s.validate(); err != nil {
		return Spec{}, fmt.Errorf("launcher: %w", err)
	}
	return s, nil
}

// Args returns the argv of a launcher that runs path with argv under s:
// Arg0, the encoded s, path, then argv. path must be absolute and argv
// non-empty (argv[0] is the binary's own argv[0]).
func Args(s Spec, path string, argv []string) ([]string, error) {
	text, err := s.encode()
	if err != nil {
		return nil, err
	}
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("launcher: binary %w", err)
	}
	if len(argv) == 0 {
		return nil, errors.New("launcher: empty argv")
	}
	return append([]string{Arg0, text, path}, argv...), nil
}

// Parse is the inverse of Args: it returns the Spec, binary path and argv
// of a launcher's argv, or an error naming what is wrong.
func Parse(args []string) (s Spec, path string, argv []string, err error) {
	if len(args) < 4 || args[0] != Arg0 {
		return Spec{}, "", nil, fmt.Errorf("launcher: want %s <spec> <path> <argv0> [args...], got %d arguments", Arg0, len(args))
	}
	if s, err = decodeSpec(args[1]); err != nil {
		return Spec{}, "", nil, err
	}
	if err := checkPath(args[2]); err != nil {
		return Spec{}, "", nil, fmt.Errorf("launcher: binary %w", err)
	}
	return s, args[2], args[3:], nil
}

// Handle is the runner's side of one launcher: its status channel and the
// descriptors the launcher inherits.
type Handle struct {
	ours  *os.File
	child []*os.File // closed in the runner once the launcher started
}

// Prepare turns c into a launcher of path with argv under s: it sets
// c.Path, c.Args and c.ExtraFiles (which must be empty), and builds the
// Landlock ruleset when s.Landlock. After c.Start the caller calls Started
// and then Await; when Start fails it calls Close. c.SysProcAttr is the
// caller's (s.NetNS needs NetNSAttr).
func Prepare(c *exec.Cmd, s Spec, path string, argv []string) (*Handle, error) {
	if len(c.ExtraFiles) > 0 {
		return nil, errors.New("launcher: the command already has extra files")
	}
	args, err := Args(s, path, argv)
	if err != nil {
		return nil, err
	}
	ours, theirs, err := channel()
	if err != nil {
		return nil, err
	}
	h := &Handle{ours: ours, child: []*os.File{theirs}}
	if s.Landlock {
		rs, err := Ruleset(s)
		if err != nil {
			h.Close()
			return nil, fmt.Errorf("launcher: %w", err)
		}
		h.child = append(h.child, rs)
	}
	c.Path = Self
	c.Args = args
	c.ExtraFiles = h.child
	return h, nil
}

// Started closes the runner's copies of the launcher's descriptors.
func (h *Handle) Started() {
	for _, f := range h.child {
		_ = f.Close()
	}
	h.child = nil
}

// Await is Await of the status channel.
func (h *Handle) Await() (listener *os.File, err error) {
	h.Started()
	return Await(h.ours)
}

// Status returns the runner's end of the status channel, for Await.
func (h *Handle) Status() *os.File { return h.ours }

// Close releases everything of a launcher that was not started.
func (h *Handle) Close() {
	h.Started()
	_ = h.ours.Close()
}

// Channel returns a new status channel: the runner's end, to Await, and
// the child's end, to hand to whatever confines the child (a launcher, or
// the zygote).
func Channel() (ours, theirs *os.File, err error) { return channel() }

// channel returns a connected pair of unix SOCK_SEQPACKET sockets, both
// close-on-exec (os/exec dups the launcher's end onto descriptor 3).
func channel() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: status channel: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "launcher-status"), os.NewFile(uintptr(fds[1]), "launcher-status-child"), nil
}

// NetNSAttr returns the clone attributes that start a launcher in a new
// user and network namespace, mapping the worker's user and group ids to
// themselves (so files keep their owners) with setgroups denied.
func NetNSAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	uid, gid := os.Geteuid(), os.Getegid()
	attr.Cloneflags |= syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET
	attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	attr.GidMappingsEnableSetgroups = false
	return attr
}

// MountNSAttr adds a new mount namespace to attr, which must already ask
// for a user namespace (NetNSAttr): the launcher of a Spec with Tmp
// mounts the child's tmpfs there.
func MountNSAttr(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	attr.Cloneflags |= syscall.CLONE_NEWNS
	return attr
}

// maxMessage bounds one status message.
const maxMessage = 64 << 10

// message is one record on the status channel.
type message struct {
	// Listener marks the record that carries the proxy's listening socket.
	Listener bool `json:"listener,omitempty"`
	// Tmp marks the record that carries the root of the child's tmpfs.
	Tmp bool `json:"tmp,omitempty"`
	// Error is set on a failure record.
	*Error
}

// Files are the descriptors a launcher (or the zygote's child) hands the
// runner before it executes the binary; the caller owns them.
type Files struct {
	// Listener is the egress proxy's listening socket (Spec.Net ==
	// NetProxy), nil otherwise.
	Listener *os.File
	// Tmp is an O_PATH descriptor of the root of the child's tmpfs TMPDIR
	// (Spec.Tmp), nil otherwise. It keeps the tmpfs, and the memory it
	// holds, alive until it is closed.
	Tmp *os.File
}

// Close closes the descriptors that are set.
func (f Files) Close() {
	closeFile(f.Listener)
	closeFile(f.Tmp)
}

// Await is AwaitFiles for a caller that wants the proxy's listener alone:
// it closes the tmpfs descriptor, if one came.
func Await(ours *os.File) (listener *os.File, err error) {
	f, err := AwaitFiles(ours)
	closeFile(f.Tmp)
	return f.Listener, err
}

// AwaitFiles reads the status channel of a started launcher until the
// launcher executed its binary or failed, and closes ours. It returns the
// descriptors the launcher sent (each at most once, in any order) when the
// binary was executed (the channel closed on exec without a failure
// record), or the launcher's error: an *Error, which wraps the
// syscall.Errno it failed with, if any. On an error every descriptor
// received is closed.
func AwaitFiles(ours *os.File) (_ Files, err error) {
	defer ours.Close()
	var got Files
	defer func() {
		if err != nil {
			got.Close()
		}
	}()
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, rerr := unix.Recvmsg(int(ours.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if rerr == unix.EINTR {
			continue
		}
		if rerr != nil {
			return Files{}, fmt.Errorf("launcher: read status: %w", rerr)
		}
		if n == 0 && oobn == 0 {
			return got, nil // closed on exec
		}
		fds, ferr := rights(oob[:oobn])
		var m message
		if jerr := json.Unmarshal(buf[:n], &m); jerr != nil || ferr != nil {
			closeFDs(fds)
			return Files{}, fmt.Errorf("launcher: unreadable status %q", buf[:min(n, 256)])
		}
		switch {
		case m.Error != nil:
			closeFDs(fds)
			if m.Error.Message == "" && m.Error.Errno != 0 {
				m.Error.Message = syscall.Errno(m.Error.Errno).Error()
			}
			return Files{}, m.Error
		case m.Listener && !m.Tmp && len(fds) == 1 && got.Listener == nil:
			got.Listener = os.NewFile(uintptr(fds[0]), "egress-listener")
		case m.Tmp && !m.Listener && len(fds) == 1 && got.Tmp == nil:
			got.Tmp = os.NewFile(uintptr(fds[0]), "child-tmpfs")
		default:
			closeFDs(fds)
			return Files{}, fmt.Errorf("launcher: unexpected status %q with %d descriptors", buf[:min(n, 256)], len(fds))
		}
	}
}

// rights returns the descriptors passed in a control message.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err != nil {
			closeFDs(fds)
			return nil, err
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

// Error is a launcher's failure, as Await returns it.
type Error struct {
	// Step is what failed: "spec", "cgroup", "network", "tmp",
	// "capabilities", "landlock", "seccomp" or "exec <path>".
	Step string `json:"step"`
	// Message is the error's text.
	Message string `json:"message"`
	// Errno is the system error number, 0 when there is none.
	Errno int `json:"errno,omitempty"`
}

// Error returns "<step>: <message>".
func (e *Error) Error() string { return e.Step + ": " + e.Message }

// Unwrap returns the syscall.Errno of the failure, or nil.
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return syscall.Errno(e.Errno)
}

func init() {
	if isLauncher(os.Args) {
		os.Exit(launch(os.Args, statusFD))
	}
}

// isLauncher reports whether this process was started in launcher mode:
// argv[0] is Arg0 and descriptor 3 is a socket.
func isLauncher(args []string) bool {
	if len(args) == 0 || args[0] != Arg0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(statusFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// Modes of argv[1] other than a Spec.
const (
	checkArg = "check"
	probeArg = "probe"
)

// Check starts a launcher with attr that exits at once without confining
// or running anything, and waits for it. It tells whether children can be
// started that way: a seccomp filter may refuse clone3, which placing a
// child in a cgroup at start needs.
func Check(attr *syscall.SysProcAttr) error {
	return run([]string{Arg0, checkArg}, attr, Spec{})
}

// Probe starts a launcher with attr that applies s (everything but the
// execve: cgroups, network, tmpfs, capabilities, Landlock, seccomp) and exits,
// and waits for it: nil when this machine allows all of s.
func Probe(s Spec, attr *syscall.SysProcAttr) error {
	text, err := s.encode()
	if err != nil {
		return err
	}
	return run([]string{Arg0, probeArg, text}, attr, s)
}

func run(args []string, attr *syscall.SysProcAttr, s Spec) error {
	c := exec.Command(Self)
	c.Args = args
	c.SysProcAttr = attr
	ours, theirs, err := channel()
	if err != nil {
		return err
	}
	h := &Handle{ours: ours, child: []*os.File{theirs}}
	if s.Landlock {
		rs, err := Ruleset(s)
		if err != nil {
			h.Close()
			return fmt.Errorf("launcher: %w", err)
		}
		h.child = append(h.child, rs)
	}
	c.ExtraFiles = h.child
	if err := c.Start(); err != nil {
		h.Close()
		return fmt.Errorf("launcher: start: %w", err)
	}
	l, awaitErr := h.Await()
	closeFile(l)
	waitErr := c.Wait()
	if awaitErr != nil {
		return awaitErr
	}
	if waitErr != nil {
		return fmt.Errorf("launcher: %w", waitErr)
	}
	return nil
}

// launch confines this process and executes the binary; it returns only
// when that fails, with the exit status, after reporting on status.
func launch(args []string, status int) int {
	if len(args) == 2 && args[1] == checkArg {
		return 0
	}
	// The binary must not inherit the status channel: exec closes it,
	// which tells Await that all went well.
	unix.CloseOnExec(status)
	if len(args) == 3 && args[1] == probeArg {
		s, err := decodeSpec(args[2])
		if err != nil {
			return fail(status, "spec", err)
		}
		if step, err := confine(s, status); err != nil {
			return fail(status, step, err)
		}
		return 0
	}
	s, path, argv, err := Parse(args)
	if err != nil {
		return fail(status, "spec", err)
	}
	if step, err := confine(s, status); err != nil {
		return fail(status, step, err)
	}
	err = syscall.Exec(path, argv, os.Environ())
	return fail(status, "exec "+path, err)
}

// fail reports err on status and returns the exit status for it.
func fail(status int, step string, err error) int {
	e := Error{Step: step, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = int(errno)
	}
	if b, merr := json.Marshal(message{Error: &e}); merr == nil {
		_ = unix.Sendmsg(status, b, nil, nil, 0)
	}
	_ = unix.Close(status)
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitCannotRun
}
