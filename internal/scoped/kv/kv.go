// Package kv is the scoped key-value accessor: it gives a tool one store (its
// tool-private, session or personality scope) inside the shared storage
// bucket, and nothing outside it.
package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/tool"
)

// MaxKeyBytes is the longest key, in bytes.
const MaxKeyBytes = 1024

// keyInvalidDetail is the one detail of KV_KEY_INVALID.
const keyInvalidDetail = "key must be 1 to 1024 bytes of UTF-8"

var (
	// ErrNotDeclared is returned by every method of an accessor built without
	// a storage grant (or with an empty scope id): the tool did not declare
	// storage, so it has no store.
	ErrNotDeclared = errors.New("storage is not declared for this tool")
	// ErrNoBackend is returned by every method of an accessor built without a
	// bucket. The worker refuses such calls before they run (fail closed).
	ErrNoBackend = errors.New("storage backend is not configured")
)

// Accessor implements tool.KV for one call, over one scope of the Storage
// bucket. It is safe for concurrent use.
type Accessor struct {
	kv         *bus.KV
	scope      string // encoded scope id
	ttlDefault time.Duration
	onDeny     func(error)
	unusable   error // non-nil: every method returns it
	now        func() time.Time
}

var _ tool.KV = (*Accessor)(nil)

// New returns the KV accessor of one call over kv (the bus.Storage bucket).
// g is the call's resolved storage grant: its ScopeID selects the store and
// its TTLDefault applies to writes without their own TTL. A nil g (or an
// empty ScopeID) gives an accessor whose every method returns ErrNotDeclared;
// a nil kv one whose every method returns ErrNoBackend. onDeny, when not nil,
// is called with every denial (ErrNotDeclared, KV_KEY_INVALID) before it is
// returned.
func New(kv *bus.KV, g *capability.StorageGrant, onDeny func(error)) *Accessor {
	a := &Accessor{kv: kv, onDeny: onDeny, now: time.Now}
	switch {
	case g == nil || g.ScopeID == "":
		a.unusable = ErrNotDeclared
	case kv == nil:
		a.unusable = ErrNoBackend
	default:
		a.scope = encodeScope(g.ScopeID)
		a.ttlDefault = g.TTLDefault
	}
	return a
}

// check returns the error of an unusable accessor, or a KV_KEY_INVALID
// denial for a key (or, with allowEmpty, a list prefix) that is not 1 to 1024
// bytes of UTF-8. Denials go to onDeny first.
func (a *Accessor) check(key string, allowEmpty bool) error {
	if a.unusable != nil {
		if errors.Is(a.unusable, ErrNotDeclared) {
			a.deny(a.unusable)
		}
		return a.unusable
	}
	if (key == "" && !allowEmpty) || len(key) > MaxKeyBytes || !utf8.ValidString(key) {
		err := tool.Deny(tool.ErrKVKeyInvalid, keyInvalidDetail)
		a.deny(err)
		return err
	}
	return nil
}

func (a *Accessor) deny(err error) {
	if a.onDeny != nil {
		a.onDeny(err)
	}
}

// Get returns the value of key. found is false, with a nil error, when key
// has no value or its value has expired. An invalid key is a
// *tool.DenialError matching tool.ErrKVKeyInvalid.
func (a *Accessor) Get(ctx context.Context, key string) (value []byte, found bool, err error) {
	if err := a.check(key, false); err != nil {
		return nil, false, err
	}
	bk := encodeKey(a.scope, key)
	e, found, err := a.kv.Get(ctx, bk)
	if err != nil {
		return nil, false, unavailable("kv get", err)
	}
	if !found {
		return nil, false, nil
	}
	env, err := decodeEnvelope(e.Value)
	if err != nil {
		return nil, false, fmt.Errorf("kv get: %w", err)
	}
	if env.expired(a.now()) {
		a.purgeExpired(ctx, bk, e.Revision)
		return nil, false, nil
	}
	return env.V, true, nil
}

// Set stores value under key. ttl > 0 makes the entry expire after ttl;
// ttl == 0 uses the grant's TTLDefault (0: never); ttl < 0 is an error. An
// invalid key is a *tool.DenialError matching tool.ErrKVKeyInvalid.
func (a *Accessor) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := a.check(key, false); err != nil {
		return err
	}
	if ttl < 0 {
		return fmt.Errorf("kv set: ttl must not be negative, got %s", ttl)
	}
	if ttl == 0 {
		ttl = a.ttlDefault
	}
	env := envelope{V: value}
	if ttl > 0 {
		env.Exp = a.now().Add(ttl).UnixNano()
	}
	data, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("kv set: %w", err)
	}
	bk := encodeKey(a.scope, key)
	if err := a.write(ctx, bk, data, serverTTL(ttl)); err != nil {
		return unavailable("kv set", err)
	}
	return nil
}

// errContended ends a write that lost maxWriteAttempts races in a row.
var errContended = errors.New("the key is being written concurrently")

// unavailable wraps an error of the storage bucket: a bus fault is
// tool.ErrUnavailable (the worker hands the call back for redelivery); the
// call's own cancellation and a contended key are not.
func unavailable(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errContended) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, tool.ErrUnavailable, err)
}

// maxWriteAttempts bounds the compare-and-set loop of write: each failed
// attempt means another writer's revision landed in between, so the key
// has made progress; a writer starved this often gives up.
const maxWriteAttempts = 100

// write stores data under the bucket key bk with the server-side TTL ttl
// (0: none) as a new revision: created when the key has no value, else
// published over the latest revision with that revision expected, so the
// new revision carries its own TTL (a plain put or update would carry none,
// and the server would keep the key forever). Losing a race to another
// writer retries; the last write wins, as for any Set.
func (a *Accessor) write(ctx context.Context, bk string, data []byte, ttl time.Duration) error {
	for range maxWriteAttempts {
		e, found, err := a.kv.Get(ctx, bk)
		if err != nil {
			return err
		}
		if found {
			_, err = a.kv.UpdateTTL(ctx, bk, data, e.Revision, ttl)
		} else {
			_, err = a.kv.Create(ctx, bk, data, ttl)
		}
		if err == nil || (!errors.Is(err, bus.ErrConflict) && !errors.Is(err, bus.ErrKeyExists)) {
			return err
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
	}
	return fmt.Errorf("gave up after %d attempts: %w", maxWriteAttempts, errContended)
}

// Delete removes key. Deleting a key that has no value is not an error. An
// invalid key is a *tool.DenialError matching tool.ErrKVKeyInvalid.
func (a *Accessor) Delete(ctx context.Context, key string) error {
	if err := a.check(key, false); err != nil {
		return err
	}
	if err := a.kv.Purge(ctx, encodeKey(a.scope, key), 0, bus.StorageMarkerTTL); err != nil {
		return unavailable("kv delete", err)
	}
	return nil
}

// List returns the keys of this scope that start with prefix ("" lists every
// key) and have an unexpired value, sorted bytewise, never nil. A prefix that
// is longer than 1024 bytes or not UTF-8 is a *tool.DenialError matching
// tool.ErrKVKeyInvalid. List reads every value of the scope.
func (a *Accessor) List(ctx context.Context, prefix string) ([]string, error) {
	if err := a.check(prefix, true); err != nil {
		return nil, err
	}
	entries, err := a.kv.EntriesWithPrefix(ctx, a.scope)
	if err != nil {
		return nil, unavailable("kv list", err)
	}
	now := a.now()
	keys := []string{}
	var expired []bus.Entry
	for _, e := range entries {
		key, ok := decodeKey(a.scope, e.Key)
		if !ok {
			return nil, fmt.Errorf("kv list: bucket key %q is not a storage key", e.Key)
		}
		if !strings.HasPrefix(key, prefix) {
			continue
		}
		env, err := decodeEnvelope(e.Value)
		if err != nil {
			return nil, fmt.Errorf("kv list: %w", err)
		}
		if env.expired(now) {
			expired = append(expired, e)
			continue
		}
		keys = append(keys, key)
	}
	for _, e := range expired {
		a.purgeExpired(ctx, e.Key, e.Revision)
	}
	slices.Sort(keys)
	return keys, nil
}

// purgeExpired removes an entry found expired, unless it was rewritten since
// (rev is no longer its latest revision). It is best effort: an entry left
// behind is still never returned, and is removed on a later read.
func (a *Accessor) purgeExpired(ctx context.Context, bucketKey string, rev uint64) {
	_ = a.kv.Purge(ctx, bucketKey, rev, bus.StorageMarkerTTL)
}
