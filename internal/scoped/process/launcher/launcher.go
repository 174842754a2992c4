// Package launcher confines a child process with Landlock before the
// child's own binary runs.
//
// The process runner does not start a confined child directly. It runs the
// current binary again (Self, /proc/self/exe) in launcher mode: argv[0] is
// Arg0, argv[1] the encoded Spec, argv[2] the absolute path of the binary to
// run and argv[3:] that binary's argv; file descriptor 3 is the write end of
// a status pipe. In that mode the launcher applies the Spec's Landlock
// ruleset to itself and execve(2)s the binary with the environment it was
// given, so the binary starts confined and shares no Go runtime state with
// the worker. When any step fails the launcher writes the error to the
// status pipe and exits with status 126 (127 when the binary does not
// exist); the runner reads that pipe with Await. With argv[1] "check"
// instead, the launcher exits 0 at once (Check).
//
// Importing this package installs the hook: an init function that, in
// launcher mode, never returns. The process package imports it, so every
// binary that links the worker (the capstan worker, a user's own worker
// binary, a `go test` binary) handles launcher mode before its main runs.
// Launcher mode needs both argv[0] equal to Arg0 and descriptor 3 open on a
// pipe, so an ordinary invocation never enters it. Nothing of the worker's
// environment reaches the launcher: it runs with the child's environment.
package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// statusFD is the descriptor of the status pipe's write end in the launcher.
const statusFD = 3

// specVersion is the version of the Spec encoding; a launcher refuses any
// other, so a worker and a launcher built from different sources never
// misread each other.
const specVersion = 1

// Exit statuses of a launcher that could not run the binary, as a shell
// reports them.
const (
	exitCannotRun = 126
	exitNotFound  = 127
)

// Spec is the confinement of one child: the file hierarchies it may read
// and execute, those it may also write, and whether it may use the network.
// Every path must be absolute and clean; a path that does not exist when
// the launcher runs is skipped. A path naming a file grants that file only.
type Spec struct {
	// Version is set by Args; a Spec with another version is refused.
	Version int `json:"v"`
	// Read lists hierarchies the child may read, list and execute.
	Read []string `json:"read,omitempty"`
	// Write lists hierarchies the child may read, execute, create, write,
	// truncate, rename, link and remove in.
	Write []string `json:"write,omitempty"`
	// Network leaves TCP (and, from Landlock ABI 10, UDP) unrestricted;
	// false denies every bind and connect that Landlock can restrict.
	Network bool `json:"network,omitempty"`
}

// validate reports a Spec the launcher would refuse.
func (s Spec) validate() error {
	if s.Version != specVersion {
		return fmt.Errorf("spec version %d, want %d", s.Version, specVersion)
	}
	for _, list := range [][]string{s.Read, s.Write} {
		for _, p := range list {
			if err := checkPath(p); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q must be absolute and clean", p)
	}
	return nil
}

// Args returns the argv of a launcher that runs path with argv under s:
// Arg0, the encoded s, path, then argv. path must be absolute and argv
// non-empty (argv[0] is the binary's own argv[0]).
func Args(s Spec, path string, argv []string) ([]string, error) {
	s.Version = specVersion
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("launcher: %w", err)
	}
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("launcher: binary %w", err)
	}
	if len(argv) == 0 {
		return nil, errors.New("launcher: empty argv")
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("launcher: encode spec: %w", err)
	}
	return append([]string{Arg0, string(b), path}, argv...), nil
}

// Parse is the inverse of Args: it returns the Spec, binary path and argv
// of a launcher's argv, or an error naming what is wrong.
func Parse(args []string) (s Spec, path string, argv []string, err error) {
	if len(args) < 4 || args[0] != Arg0 {
		return Spec{}, "", nil, fmt.Errorf("launcher: want %s <spec> <path> <argv0> [args...], got %d arguments", Arg0, len(args))
	}
	dec := json.NewDecoder(strings.NewReader(args[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Spec{}, "", nil, fmt.Errorf("launcher: decode spec: %w", err)
	}
	if dec.More() {
		return Spec{}, "", nil, errors.New("launcher: decode spec: trailing data")
	}
	if err := s.validate(); err != nil {
		return Spec{}, "", nil, fmt.Errorf("launcher: %w", err)
	}
	if err := checkPath(args[2]); err != nil {
		return Spec{}, "", nil, fmt.Errorf("launcher: binary %w", err)
	}
	return s, args[2], args[3:], nil
}

// Prepare turns c into a launcher of path with argv under s: it sets
// c.Path, c.Args and c.ExtraFiles (which must be empty). It returns the
// status pipe: after c.Start the caller closes w and calls Await(r); when
// Start fails it closes both.
func Prepare(c *exec.Cmd, s Spec, path string, argv []string) (r, w *os.File, err error) {
	if len(c.ExtraFiles) > 0 {
		return nil, nil, errors.New("launcher: the command already has extra files")
	}
	args, err := Args(s, path, argv)
	if err != nil {
		return nil, nil, err
	}
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("launcher: status pipe: %w", err)
	}
	c.Path = Self
	c.Args = args
	c.ExtraFiles = []*os.File{w}
	return r, w, nil
}

// Await reads the status pipe of a started launcher until it closes and
// closes r. It returns nil when the launcher executed the binary (the pipe
// closed on exec without a word), or the launcher's error: an *Error,
// which wraps the syscall.Errno it failed with, if any.
func Await(r *os.File) error {
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return fmt.Errorf("launcher: read status: %w", err)
	}
	if len(b) == 0 {
		return nil
	}
	var e Error
	if err := json.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("launcher: unreadable status %q", b)
	}
	return &e
}

// Error is a launcher's failure, as Await returns it.
type Error struct {
	// Step is what failed: "spec", "landlock" or "exec <path>".
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
		os.Exit(launch(os.Args, os.NewFile(statusFD, "launcher-status")))
	}
}

// isLauncher reports whether this process was started in launcher mode:
// argv[0] is Arg0 and descriptor 3 is a pipe.
func isLauncher(args []string) bool {
	if len(args) == 0 || args[0] != Arg0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(statusFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

// checkArg, as argv[1], makes a launcher exit 0 at once (Check).
const checkArg = "check"

// Check starts a launcher with attr that exits at once without confining
// or running anything, and waits for it. It tells whether children can be
// started that way: a seccomp filter may refuse clone3, which placing a
// child in a cgroup at start needs.
func Check(attr *syscall.SysProcAttr) error {
	c := exec.Command(Self)
	c.Args = []string{Arg0, checkArg}
	c.SysProcAttr = attr
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("launcher: status pipe: %w", err)
	}
	defer r.Close()
	c.ExtraFiles = []*os.File{w}
	err = c.Start()
	_ = w.Close()
	if err != nil {
		return fmt.Errorf("launcher: start: %w", err)
	}
	if err := c.Wait(); err != nil {
		return fmt.Errorf("launcher: %w", err)
	}
	return nil
}

// launch confines this process and executes the binary; it returns only
// when that fails, with the exit status, after reporting on status.
func launch(args []string, status *os.File) int {
	if len(args) == 2 && args[1] == checkArg {
		return 0
	}
	// The binary must not inherit the status pipe: exec closes it, which
	// tells Await that all went well.
	unix.CloseOnExec(statusFD)
	s, path, argv, err := Parse(args)
	if err != nil {
		return fail(status, "spec", err)
	}
	if err := Restrict(s); err != nil {
		return fail(status, "landlock", err)
	}
	err = syscall.Exec(path, argv, os.Environ())
	return fail(status, "exec "+path, err)
}

// fail reports err on status and returns the exit status for it.
func fail(status *os.File, step string, err error) int {
	e := Error{Step: step, Message: err.Error()}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		e.Errno = int(errno)
	}
	if b, merr := json.Marshal(e); merr == nil {
		_, _ = status.Write(b)
	}
	_ = status.Close()
	if errors.Is(err, syscall.ENOENT) {
		return exitNotFound
	}
	return exitCannotRun
}
