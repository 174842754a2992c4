package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KV errors, tested with errors.Is.
var (
	// ErrKeyExists is returned by Create when the key already has a value.
	ErrKeyExists = errors.New("key exists")
	// ErrConflict is returned by Update when the revision is not the latest.
	ErrConflict = errors.New("revision conflict")
)

// Entry is one KV value.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	Created  time.Time
	// Deleted is true for a delete or purge marker seen by a watcher.
	Deleted bool
}

// KV is one of Capstan's buckets.
type KV struct {
	kv  jetstream.KeyValue
	js  jetstream.JetStream // for UpdateTTL, which KeyValue cannot express
	den *denials
}

type kvCache struct {
	mu      sync.Mutex
	buckets map[Bucket]*KV
}

// KV returns a handle on bucket b (cached per connection).
func (c *Conn) KV(ctx context.Context, b Bucket) (*KV, error) {
	c.kvs.mu.Lock()
	defer c.kvs.mu.Unlock()
	if kv, ok := c.kvs.buckets[b]; ok {
		return kv, nil
	}
	name := c.bucketConfig(b).Bucket
	var h jetstream.KeyValue
	err := c.den.guard(ctx, []string{apiStreamInfo(kvStream(name))}, func(ctx context.Context) (err error) {
		h, err = c.js.KeyValue(ctx, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: bucket %s: %w", name, err)
	}
	if c.kvs.buckets == nil {
		c.kvs.buckets = make(map[Bucket]*KV)
	}
	kv := &KV{kv: h, js: c.js, den: c.den}
	c.kvs.buckets[b] = kv
	return kv, nil
}

// ReadKey returns the value of key in bucket b, found false when it has none.
// It reads with a direct get naming the key in its request subject
// ($JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>) and needs no handle on
// the bucket (which needs the info of the bucket's stream): a user allowed to
// read only some keys (a tenant, its own personality) can read them.
func (c *Conn) ReadKey(ctx context.Context, b Bucket, key string) (Entry, bool, error) {
	if key == "" || strings.ContainsAny(key, "*> \t\r\n") || strings.HasPrefix(key, ".") || strings.HasSuffix(key, ".") {
		return Entry{}, false, fmt.Errorf("bus: key %q is not a valid key", key)
	}
	bucket := c.bucketConfig(b).Bucket
	m, err := c.DirectLast(ctx, kvStream(bucket), kvSubject(bucket, key))
	if errors.Is(err, ErrNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("bus: get %s/%s: %w", bucket, key, err)
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return Entry{}, false, nil
	}
	return Entry{Key: key, Value: m.Data, Revision: m.StreamSeq, Created: m.Time}, true, nil
}

// write runs op, a write of key, so that the server's refusal of the write
// (a publish permissions violation on $KV.<bucket>.<key>) ends it at once with
// a *PermissionError.
func (k *KV) write(ctx context.Context, key string, op func(context.Context) error) error {
	return k.den.guard(ctx, []string{kvSubject(k.kv.Bucket(), key)}, op)
}

// Get returns the value of key; found is false when it has none.
func (k *KV) Get(ctx context.Context, key string) (e Entry, found bool, err error) {
	var v jetstream.KeyValueEntry
	b := k.kv.Bucket()
	// A direct get names the key in its subject; a plain message get does not.
	read := []string{"$JS.API.DIRECT.GET." + kvStream(b) + "." + kvSubject(b, key), "$JS.API.STREAM.MSG.GET." + kvStream(b)}
	err = k.den.guard(ctx, read, func(ctx context.Context) (err error) {
		v, err = k.kv.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("bus: get %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return Entry{Key: key, Value: v.Value(), Revision: v.Revision(), Created: v.Created()}, true, nil
}

// Put sets key to value.
func (k *KV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	var rev uint64
	err := k.write(ctx, key, func(ctx context.Context) (err error) {
		rev, err = k.kv.Put(ctx, key, value)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("bus: put %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return rev, nil
}

// Create sets key only if it has no value; ttl > 0 gives the key its own TTL
// (buckets with per-key TTLs only). It returns ErrKeyExists otherwise.
func (k *KV) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(ttl))
	}
	var rev uint64
	err := k.write(ctx, key, func(ctx context.Context) (err error) {
		rev, err = k.kv.Create(ctx, key, value, opts...)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrKeyExists
	}
	if err != nil {
		return 0, fmt.Errorf("bus: create %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return rev, nil
}

// Update sets key only if its latest revision is rev; ErrConflict otherwise.
func (k *KV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	var n uint64
	err := k.write(ctx, key, func(ctx context.Context) (err error) {
		n, err = k.kv.Update(ctx, key, value, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || wrongLastSeq(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("bus: update %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return n, nil
}

// DeleteRev removes key only if its latest revision is still rev; it returns
// ErrConflict otherwise (someone else wrote the key since, or it expired).
func (k *KV) DeleteRev(ctx context.Context, key string, rev uint64) error {
	err := k.write(ctx, key, func(ctx context.Context) error {
		return k.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	})
	switch {
	case err == nil, errors.Is(err, jetstream.ErrKeyNotFound):
		return nil
	case wrongLastSeq(err):
		return ErrConflict
	}
	return fmt.Errorf("bus: delete %s/%s: %w", k.kv.Bucket(), key, err)
}

// wrongLastSeq reports a failed compare-and-set: the key's latest revision was
// not the expected one (single-replica and replicated streams answer with
// different codes).
func wrongLastSeq(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Delete removes key (a no-op when it has no value).
func (k *KV) Delete(ctx context.Context, key string) error {
	err := k.write(ctx, key, func(ctx context.Context) error { return k.kv.Delete(ctx, key) })
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("bus: delete %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return nil
}

// Keys lists the keys that have a value.
func (k *KV) Keys(ctx context.Context) ([]string, error) {
	var keys []string
	err := k.den.guard(ctx, apiConsumer(kvStream(k.kv.Bucket())), func(ctx context.Context) (err error) {
		keys, err = k.kv.Keys(ctx)
		return err
	})
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bus: keys %s: %w", k.kv.Bucket(), err)
	}
	return keys, nil
}

// Watch calls fn for every current value, then for every change, until ctx
// ends or stop is called. It returns once the current values have been passed
// to fn. fn runs on one goroutine.
func (k *KV) Watch(ctx context.Context, fn func(Entry)) (stop func(), err error) {
	return k.WatchKeys(ctx, []string{">"}, fn)
}

// WatchKeys is Watch of the keys matching one of patterns (NATS wildcards
// over the key's dot-separated tokens).
func (k *KV) WatchKeys(ctx context.Context, patterns []string, fn func(Entry)) (stop func(), err error) {
	// Not under den.guard: the watcher lives as long as ctx, and a
	// guard's context ends with the call.
	w, err := k.kv.WatchFiltered(ctx, patterns)
	if err != nil {
		return nil, fmt.Errorf("bus: watch %s: %w", k.kv.Bucket(), err)
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		initial := true
		for {
			select {
			case <-ctx.Done():
				if initial {
					close(ready)
				}
				return
			case e, ok := <-w.Updates():
				if !ok {
					if initial {
						close(ready)
					}
					return
				}
				if e == nil {
					if initial {
						initial = false
						close(ready)
					}
					continue
				}
				fn(Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created(),
					Deleted: e.Operation() != jetstream.KeyValuePut})
			}
		}
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		_ = w.Stop()
		<-done
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = w.Stop()
			<-done
		})
	}, nil
}

// Scan returns the current values of the keys matching one of patterns
// (NATS wildcards over the key's tokens), read once; deleted keys are left
// out.
func (k *KV) Scan(ctx context.Context, patterns []string) ([]Entry, error) {
	w, err := k.kv.WatchFiltered(ctx, patterns, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("bus: scan %s: %w", k.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	var out []Entry
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: scan %s: %w", k.kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return out, nil
			}
			if e == nil {
				return out, nil
			}
			out = append(out, Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created()})
		}
	}
}
