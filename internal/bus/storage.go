package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StorageMarkerTTL is how long the Storage bucket keeps the marker the server
// leaves when a key with its own TTL expires (the bucket's limit marker TTL);
// it is also a sensible marker TTL for Purge on that bucket.
const StorageMarkerTTL = time.Minute

// EntriesWithPrefix returns the current value of every key below prefix, that
// is every key of the form prefix+"."+rest. prefix is one or more whole
// tokens: non-empty, no leading or trailing ".", no empty token, no wildcard
// ("*", ">") and no white space; anything else is an error. Deleted and purged
// keys are skipped; a key written while the listing runs is reported once,
// with its latest revision seen. The order is unspecified. Values are
// included, so listing costs as much as reading every value below prefix.
func (k *KV) EntriesWithPrefix(ctx context.Context, prefix string) ([]Entry, error) {
	if !validTokens(prefix) {
		return nil, fmt.Errorf("bus: list %s: invalid key prefix %q: want whole tokens without wildcards", k.kv.Bucket(), prefix)
	}
	var out []Entry
	err := k.den.guard(ctx, apiConsumer(kvStream(k.kv.Bucket())), func(ctx context.Context) (err error) {
		out, err = k.entriesWithPrefix(ctx, prefix)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: list %s/%s.>: %w", k.kv.Bucket(), prefix, err)
	}
	return out, nil
}

func (k *KV) entriesWithPrefix(ctx context.Context, prefix string) ([]Entry, error) {
	w, err := k.kv.WatchFiltered(ctx, []string{prefix + ".>"}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer stopWatcher(w)
	var out []Entry
	seen := make(map[string]int)
	for {
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watcher closed before the listing completed")
			}
			if e == nil { // every value present at the start has been seen
				return out, nil
			}
			entry := Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created()}
			if i, dup := seen[entry.Key]; dup {
				if entry.Revision > out[i].Revision {
					out[i] = entry
				}
				continue
			}
			seen[entry.Key] = len(out)
			out = append(out, entry)
		}
	}
}

// stopWatcher stops w and drains what its subscription may still deliver, so
// the delivery goroutine, which blocks on a full updates channel, can finish.
func stopWatcher(w jetstream.KeyWatcher) {
	_ = w.Stop()
	go func() {
		for range w.Updates() {
		}
	}()
}

// validTokens reports whether s is one or more non-empty subject tokens
// separated by "." without wildcards or white space.
func validTokens(s string) bool {
	if s == "" {
		return false
	}
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\x00") {
			return false
		}
	}
	return true
}

// Purge removes key and its history, leaving a purge marker that lives for
// markerTTL (0 keeps it; a markerTTL > 0 needs a bucket with per-key TTLs and
// must be at least a second). When rev > 0, key is purged only if rev is still
// its latest revision, and ErrConflict is returned otherwise. Purging a key
// that has no value is not an error.
func (k *KV) Purge(ctx context.Context, key string, rev uint64, markerTTL time.Duration) error {
	var opts []jetstream.KVDeleteOpt
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	if markerTTL > 0 {
		opts = append(opts, jetstream.PurgeTTL(markerTTL))
	}
	err := k.write(ctx, key, func(ctx context.Context) error { return k.kv.Purge(ctx, key, opts...) })
	if err == nil {
		return nil
	}
	if wrongLastSeq(err) {
		return ErrConflict
	}
	return fmt.Errorf("bus: purge %s/%s: %w", k.kv.Bucket(), key, err)
}

// UpdateTTL sets key to value only if rev is still its latest revision
// (ErrConflict otherwise), like Update, and gives the new revision its own
// TTL (ttl > 0, at least a second; buckets with per-key TTLs only) or none
// (ttl == 0). Update cannot do this: jetstream.KeyValue.Update publishes
// without a TTL, so a key updated with it never expires on the server.
// UpdateTTL publishes the revision itself, with the TTL header and the
// expected last sequence of the key's subject.
func (k *KV) UpdateTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if !validTokens(key) {
		return 0, fmt.Errorf("bus: update %s/%s: invalid key", k.kv.Bucket(), key)
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(rev)}
	if ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(ttl))
	}
	var ack *jetstream.PubAck
	err := k.write(ctx, key, func(ctx context.Context) (err error) {
		ack, err = k.js.PublishMsg(ctx, &nats.Msg{Subject: kvSubject(k.kv.Bucket(), key), Data: value}, opts...)
		return err
	})
	if wrongLastSeq(err) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("bus: update %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return ack.Sequence, nil
}
