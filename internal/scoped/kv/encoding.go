package kv

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// b64 encodes scope ids and keys into NATS-safe tokens: its alphabet
// (A–Z a–z 0–9 - _) has no ".", "*", ">" or white space, and Strict decoding
// accepts only the one canonical encoding of each string.
var b64 = base64.RawURLEncoding.Strict()

// encodeScope returns the subject token of a scope id.
func encodeScope(scopeID string) string {
	return b64.EncodeToString([]byte(scopeID))
}

// encodeKey returns the bucket key of key in the scope whose token is
// encScope: "<encScope>.<encoded key>". Both tokens are non-empty for a
// non-empty scope id and key, so the result is a valid NATS KV key, and since
// neither token can hold a ".", distinct (scope, key) pairs never share one.
func encodeKey(encScope, key string) string {
	return encScope + "." + b64.EncodeToString([]byte(key))
}

// decodeKey returns the key that encodeKey(encScope, key) turned into
// bucketKey; ok is false for a bucket key of another scope or one encodeKey
// cannot have produced.
func decodeKey(encScope, bucketKey string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(bucketKey, encScope+".")
	if !ok || rest == "" {
		return "", false
	}
	b, err := b64.DecodeString(rest)
	// The decoder skips '\r' and '\n'; only the canonical encoding counts.
	if err != nil || len(b) == 0 || b64.EncodeToString(b) != rest {
		return "", false
	}
	return string(b), true
}

// envelope is what the bucket stores for a key: the value and its absolute
// expiry in Unix nanoseconds (0: none). The expiry is checked on every read,
// so an expired entry is never returned whatever the server's TTL timing; the
// server's per-key TTL only removes the data afterwards.
type envelope struct {
	V   []byte `json:"v"`
	Exp int64  `json:"exp"`
}

func (e envelope) expired(now time.Time) bool {
	return e.Exp != 0 && now.UnixNano() >= e.Exp
}

func decodeEnvelope(data []byte) (envelope, error) {
	var e envelope
	if err := json.Unmarshal(data, &e); err != nil {
		return envelope{}, fmt.Errorf("stored entry is not a storage envelope: %w", err)
	}
	if e.V == nil {
		e.V = []byte{}
	}
	return e, nil
}

// serverTTL is the per-key TTL given to the server for an entry that expires
// after ttl: ttl rounded up to whole seconds (the server's unit and minimum)
// plus one second, so the server never removes an entry before its envelope
// expiry, even with some clock skew.
func serverTTL(ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return 0
	}
	return (ttl+time.Second-1)/time.Second*time.Second + time.Second
}
