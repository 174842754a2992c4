// Package reads is the STALE_WRITE read-record accessor: a shared JetStream
// KV store mapping (session, absolute path) to the modification time seen at
// the last read or write, so a read on one worker and a write on another are
// checked against each other.
package reads

import (
	"context"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
)

// Store is one session's view of the read records.
type Store struct {
	kv      *bus.KV
	session string
}

// New returns the records of session (the call's session_key, or its
// session_id when it has none) in kv.
func New(kv *bus.KV, session string) *Store { return &Store{kv: kv, session: session} }

// key encodes session and path so neither can reach another's key.
func (s *Store) key(abs string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(s.session)) + "." + enc.EncodeToString([]byte(abs))
}

// Record stores mtime as the last seen modification time of abs.
func (s *Store) Record(ctx context.Context, abs string, mtime time.Time) error {
	if _, err := s.kv.Put(ctx, s.key(abs), []byte(mtime.UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("record read of %s: %w", abs, err)
	}
	return nil
}

// Recorded returns the recorded modification time of abs, if any.
func (s *Store) Recorded(ctx context.Context, abs string) (time.Time, bool, error) {
	e, found, err := s.kv.Get(ctx, s.key(abs))
	if err != nil || !found {
		return time.Time{}, false, err
	}
	t, err := time.Parse(time.RFC3339Nano, string(e.Value))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read record of %s is corrupt", abs)
	}
	return t, true, nil
}
