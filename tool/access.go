package tool

import (
	"context"
	"io/fs"
	"time"
)

// Fetcher performs HTTP requests to the resolved host set only. Every redirect
// hop is checked again; private and metadata addresses are refused at dial time.
//
// Secrets are injected at egress (Request.SecretHeaders): the fetcher
// resolves them, sends them only to the request's first origin when the
// personality binds every ref to that host (secrets.send_to), drops them from
// any redirect hop that leaves that origin, and replaces each injected value
// in the Response by "[REDACTED]", so the tool never holds it. Refusals:
// SECRET_NOT_DECLARED for a ref the tool's grant does not allow,
// SECRET_DESTINATION ("this secret may not be sent to <host>") for an unbound
// host, both before anything is sent. A value the tool read raw
// (Capabilities.SecretsRaw) and put in a request's URL, headers or body is
// held to the same bindings.
type Fetcher interface {
	Fetch(ctx context.Context, req Request) (*Response, error)
}

// Request is an outbound HTTP request.
type Request struct {
	Method string
	URL    string
	Header map[string][]string
	Body   []byte
	// SecretHeaders maps a header name to a template whose {{ref}}
	// placeholders the fetcher replaces by secret values when it sends the
	// request, such as {"Authorization": "Bearer {{http/github/token}}"}.
	// A template is literal text and one or more placeholders "{{" ref "}}"
	// (the ref exactly, no spaces); the literal text may not contain "{{",
	// "}}" or control characters. A name may not also be set in Header.
	// Problems are a *SecretHeaderError or a SECRET_* denial; see Fetcher.
	SecretHeaders map[string]string
}

// Response is a capped HTTP response.
type Response struct {
	StatusCode int
	Status     string
	Header     map[string][]string
	Body       []byte
	// Truncated is true when the body was cut at the response cap.
	Truncated bool
	// FinalURL is the URL after redirects.
	FinalURL string
}

// FS reads and writes files inside the resolved fs_reach only. Relative paths
// are joined to the call's working dir. Methods return the absolute path they
// resolved, for messages. Reading methods (ReadFile, Exists, Stat, ReadDir)
// need the read reach, writing ones (WriteFile, MkdirAll, Remove) the write
// reach; a path outside it is a denial matching ErrPathNotReachable.
type FS interface {
	ReadFile(ctx context.Context, path string) (data []byte, abs string, err error)
	WriteFile(ctx context.Context, path string, data []byte) (abs string, err error)
	// Exists reports whether path names a file or directory (a missing
	// file is false with a nil error).
	Exists(ctx context.Context, path string) (exists bool, abs string, err error)
	Stat(ctx context.Context, path string) (fs.FileInfo, string, error)
	ReadDir(ctx context.Context, path string) ([]fs.DirEntry, string, error)
	// MkdirAll creates a directory and its missing parents (0755); an
	// existing directory is not an error.
	MkdirAll(ctx context.Context, path string) (abs string, err error)
	// Remove removes a file, a symlink (not its target) or an empty
	// directory. A granted prefix itself cannot be removed.
	Remove(ctx context.Context, path string) (abs string, err error)
}

// Secrets reads declared secret refs. Values it returns are redacted from the
// result, errors, progress, logs and spans.
type Secrets interface {
	Secret(ctx context.Context, ref string) (string, error)
}

// Runner runs allowed binaries without a shell, in their own process group,
// with a minimal environment, confined (where the kernel allows) to the
// call's fs_reach and network grant: a tool whose processes need files or
// network declares fs_reach or network besides process. Dir must lie inside
// the call's fs_reach.
type Runner interface {
	Run(ctx context.Context, cmd Command) (*ProcessResult, error)
}

// Command is a child process to run.
type Command struct {
	Binary string
	Args   []string
	Dir    string
	Env    map[string]string
	Stdin  []byte
}

// ProcessResult is the outcome of a child process; stdout and stderr are capped.
type ProcessResult struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// LimitsHit lists the call's ceilings its processes reached without
	// being killed for it, such as "pids limit 256 reached" (a fork was
	// refused); tools show them in their result.
	LimitsHit []string
}

// KV is the tool's scoped key-value store (tool-private, session or
// personality scope). Keys are 1 to 1024 bytes of UTF-8.
type KV interface {
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	Delete(ctx context.Context, key string) error
	List(ctx context.Context, prefix string) ([]string, error)
}

// ReadRecords is the shared store behind STALE_WRITE: for the call's session
// it maps an absolute path to the modification time seen when the file was
// last read (or written), so any worker can check a later write. Given to
// tools that have filesystem reach.
type ReadRecords interface {
	Record(ctx context.Context, abs string, mtime time.Time) error
	Recorded(ctx context.Context, abs string) (mtime time.Time, found bool, err error)
}
