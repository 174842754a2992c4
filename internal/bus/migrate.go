package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go/jetstream"
)

// MigrationError reports streams created by protocol version 1 that this
// component did not migrate, and why. Its message says how to migrate.
type MigrationError struct {
	// Streams are the streams still of version 1.
	Streams []string
	// Reason says why they were not migrated.
	Reason string
	// Cause is the error behind Reason, if any (a refusal of the server
	// wraps ErrPermissionDenied).
	Cause error
}

// Error names the streams, the reason and the way to migrate.
func (e *MigrationError) Error() string {
	return fmt.Sprintf("streams %s were created by Capstan protocol version 1 (no %s metadata); this component speaks version %s "+
		"and migrates them itself only when that is safe, but %s. To migrate: stop every worker and client of version 1, "+
		"let the workers finish the calls in %s (or purge it), then start one component of version %s connected as a NATS user "+
		"that may update and purge Capstan's streams (an administrator's user, or the embedded server's credentials); "+
		"see docs/protocol.md, \"Migrating from version 1\"",
		strings.Join(e.Streams, ", "), protocol.MetadataProtocol, protocol.Version, e.Reason, e.callsStream(), protocol.Version)
}

func (e *MigrationError) callsStream() string {
	for _, s := range e.Streams {
		if strings.HasSuffix(s, "_CALLS") {
			return s
		}
	}
	return "the calls stream"
}

// Unwrap returns the cause.
func (e *MigrationError) Unwrap() error { return e.Cause }

// migrate brings streams created by protocol version 1 to version 2. Their
// subjects and retention are the same; what changes is where the tokens of
// a subject are (the personality is in the subjects since version 2), the
// results stream's direct gets, and the version recorded in the metadata.
//
// It is safe when no version-1 call waits in the calls stream (a subject
// <p>.call.<pool>.<tool>, which no version-2 worker can answer) and no
// version-1 worker is live (it would take the version-2 calls of its pool
// and dead-letter them). Then it removes the version-1 results and progress
// events (subjects of the version-1 shape, which no version-2 reader asks
// for), and updates each stream: the same configuration plus the
// capstan_protocol metadata and, for the results stream, direct gets. The
// calls stream is updated last, so an interrupted migration is resumed by
// the next start. Anything else is a *MigrationError saying what to do.
func (c *Conn) migrate(ctx context.Context, v1 []versionOne) error {
	names := make([]string, len(v1))
	for i, s := range v1 {
		names[i] = s.have.Name
	}
	fail := func(cause error, format string, args ...any) error {
		return &MigrationError{Streams: names, Reason: fmt.Sprintf(format, args...), Cause: cause}
	}
	calls := c.names.CallsStream()
	if n, err := c.countSubjects(ctx, calls, c.names.Prefix()+".call.*.*"); err != nil {
		return fail(err, "the version-1 calls in %s could not be counted (%v)", calls, err)
	} else if n > 0 {
		return fail(nil, "%s holds %d version-1 calls (subjects %s.call.<pool>.<tool>)", calls, n, c.names.Prefix())
	}
	live, err := c.liveVersionOneWorkers(ctx)
	if err != nil {
		return fail(err, "the live workers could not be read (%v)", err)
	}
	if len(live) > 0 {
		return fail(nil, "version-1 workers are live: %s", strings.Join(live, ", "))
	}
	// Calls last: its metadata says the migration is complete.
	slices.SortStableFunc(v1, func(a, b versionOne) int {
		switch {
		case a.want.Name == calls:
			return 1
		case b.want.Name == calls:
			return -1
		}
		return 0
	})
	for _, s := range v1 {
		var leftovers string
		switch s.want.Name {
		case c.names.ResultsStream():
			leftovers = c.names.Prefix() + ".result.*.*" // <p>.result.<batch>.<call>
		case c.names.ProgressStream():
			leftovers = c.names.Prefix() + ".progress.*.*.*" // <p>.progress.<audience>.<batch>.<call>
		}
		if leftovers != "" {
			if err := c.PurgeSubject(ctx, s.want.Name, leftovers); err != nil {
				return fail(err, "the version-1 messages of %s could not be removed (%v)", s.want.Name, err)
			}
		}
		cfg := s.have
		cfg.Metadata = maps.Clone(cfg.Metadata)
		if cfg.Metadata == nil {
			cfg.Metadata = map[string]string{}
		}
		maps.Copy(cfg.Metadata, s.want.Metadata)
		cfg.AllowDirect = cfg.AllowDirect || s.want.AllowDirect
		err := c.den.guard(ctx, []string{apiStreamUpdate(cfg.Name)}, func(ctx context.Context) error {
			_, err := c.js.UpdateStream(ctx, cfg)
			return err
		})
		if err != nil {
			return fail(err, "%s could not be updated (%v)", cfg.Name, err)
		}
	}
	return nil
}

// countSubjects returns how many messages of stream are on subjects matching
// filter.
func (c *Conn) countSubjects(ctx context.Context, stream, filter string) (uint64, error) {
	var n uint64
	err := c.den.guard(ctx, []string{apiStreamInfo(stream)}, func(ctx context.Context) error {
		s, err := c.js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return err
		}
		for _, count := range info.State.Subjects {
			n += count
		}
		return nil
	})
	return n, err
}

// workerProtocol is the part of a live worker's record (the workers bucket,
// written by package worker) that says which protocol it speaks; version-1
// workers wrote none.
type workerProtocol struct {
	Protocol string `json:"protocol"`
}

// liveVersionOneWorkers returns the ids of the live workers whose record
// names no protocol version or another one. A user that may not list the
// workers bucket (no deployment user may; an administrator or the embedded
// server's credentials may) cannot tell: nil.
func (c *Conn) liveVersionOneWorkers(ctx context.Context) ([]string, error) {
	kv, err := c.KV(ctx, Workers)
	if errors.Is(err, ErrPermissionDenied) {
		return nil, nil
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if errors.Is(err, ErrPermissionDenied) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var old []string
	for _, k := range keys {
		e, found, err := kv.Get(ctx, k)
		if errors.Is(err, ErrPermissionDenied) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var rec workerProtocol
		if !found || json.Unmarshal(e.Value, &rec) != nil {
			continue
		}
		if rec.Protocol != protocol.Version {
			old = append(old, k)
		}
	}
	return old, nil
}
