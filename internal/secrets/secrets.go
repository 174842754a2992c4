// Package secrets resolves secret refs (such as "providers/github/token") to
// values through one small interface, with env and file backends for
// development and a cache in front of any backend.
//
// Policy is not checked here: the scoped secrets accessor checks a call's
// grant before it asks a backend.
package secrets

import (
	"context"
	"errors"
)

// Backend resolves a secret ref to its value.
//
// Contract for implementations: Resolve returns an error matching ErrNotFound
// when ref has no value, and one matching ErrUnavailable when the backend
// cannot answer now (a fault the worker retries). No error may contain a
// secret value, and errors should not name the ref (the accessor hands
// errors other than ErrNotFound on to the tool, wrapped). Resolve is safe
// for concurrent use.
type Backend interface {
	Resolve(ctx context.Context, ref string) (string, error)
}

var (
	// ErrNotFound reports a ref that has no value. Its message, "secret not
	// found", names neither the ref nor a value, so it may reach the tool.
	ErrNotFound = errors.New("secret not found")
	// ErrUnavailable reports a backend that cannot answer now (down,
	// unreachable, login failed): an infrastructure fault, retried by the
	// worker, never a verdict on the ref.
	ErrUnavailable = errors.New("secrets backend unavailable")
)
