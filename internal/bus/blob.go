package bus

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The blobs bucket holds the full outputs that result messages carry only a
// cut of (protocol.md, "Large outputs by reference"). It is a JetStream
// Object Store bucket, <p>_blobs, whose objects Capstan writes itself in the
// Object Store format (metadata on $O.<bucket>.M.<base64url(name)>, chunks on
// $O.<bucket>.C.<nuid>) so that the chunk id can start with the
// personality: NATS permissions then bind a tenant to its own blobs
// ($O.<bucket>.C.<personality>.>), which a random nuid would not allow.
const (
	// BlobTTLMargin is how much longer the blobs bucket keeps an object than
	// the results stream keeps a result: a blob is written before the
	// result that refers to it, so it outlives that result.
	BlobTTLMargin = time.Hour
	// BlobChunkSize is the size of a blob's chunks (the Object Store
	// default), smaller on a server whose max payload is smaller.
	BlobChunkSize = 128 << 10
)

// objStream is the stream of an Object Store bucket.
func objStream(bucket string) string { return "OBJ_" + bucket }

// blobsConfig is the blobs bucket's stream, configured as nats.go
// configures an Object Store bucket, with the results' retention plus
// BlobTTLMargin.
func (c *Conn) blobsConfig() jetstream.StreamConfig {
	b := c.names.BlobsBucket()
	return jetstream.StreamConfig{
		Name:        objStream(b),
		Description: "Capstan blobs: full outputs of calls whose result carries a cut",
		Subjects:    []string{"$O." + b + ".C.>", "$O." + b + ".M.>"},
		MaxAge:      c.cfg.ResultsMaxAge + BlobTTLMargin,
		MaxBytes:    -1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.Replicas,
		Discard:     jetstream.DiscardNew,
		AllowRollup: true,
		AllowDirect: true,
	}
}

// ensureBlobs reads the blobs bucket's stream and creates it when it does
// not exist. A user that may not read it leaves it to others; one that may
// read but not create it gets a *MissingError, which EnsureTopology
// tolerates (blobs are optional for a client; the worker checks with
// BlobsReady).
func (c *Conn) ensureBlobs(ctx context.Context) error {
	want := c.blobsConfig()
	have, err := c.streamConfig(ctx, want.Name)
	switch {
	case err == nil:
		return checkBlobs(*have, want)
	case errors.Is(err, ErrPermissionDenied):
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("bus: read bucket %s: %w", c.names.BlobsBucket(), err)
	}
	err = c.den.guard(ctx, []string{apiStreamCreate(want.Name)}, func(ctx context.Context) error {
		_, err := c.js.CreateStream(ctx, want)
		return err
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrPermissionDenied):
		return &MissingError{Kind: "bucket", Name: c.names.BlobsBucket(), Cause: err}
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		if have, err = c.streamConfig(ctx, want.Name); err != nil {
			return fmt.Errorf("bus: read bucket %s: %w", c.names.BlobsBucket(), err)
		}
		return checkBlobs(*have, want)
	}
	return fmt.Errorf("bus: create bucket %s: %w", c.names.BlobsBucket(), err)
}

// checkBlobs compares an existing blobs stream with the wanted one: the
// Object Store subjects, rollups allowed (the metadata is written with a
// rollup) and no copies. Retention, size limits and replicas are the
// operator's to tune.
func checkBlobs(have, want jetstream.StreamConfig) error {
	var reasons []string
	hs, ws := slices.Clone(have.Subjects), slices.Clone(want.Subjects)
	slices.Sort(hs)
	slices.Sort(ws)
	if !slices.Equal(hs, ws) {
		reasons = append(reasons, fmt.Sprintf("subjects are %v, want %v", have.Subjects, want.Subjects))
	}
	if !have.AllowRollup {
		reasons = append(reasons, "rollups are not allowed, want allowed")
	}
	reasons = append(reasons, copyDiff(have)...)
	if len(reasons) > 0 {
		return &IncompatibleError{Kind: "bucket", Name: strings.TrimPrefix(want.Name, "OBJ_"), Reasons: reasons}
	}
	return nil
}

// BlobsReady reports whether the blobs bucket exists: nil when it does, a
// *MissingError when it does not (and this user could not create it), or
// the error that prevented the check.
func (c *Conn) BlobsReady(ctx context.Context) error {
	ok, err := c.StreamExists(ctx, objStream(c.names.BlobsBucket()))
	switch {
	case err != nil:
		return fmt.Errorf("bus: bucket %s: %w", c.names.BlobsBucket(), err)
	case !ok:
		return &MissingError{Kind: "bucket", Name: c.names.BlobsBucket(), Cause: errors.New("not created")}
	}
	return nil
}

// StreamExists reports whether stream exists. It is false with a nil error
// only when the server says the stream does not exist.
func (c *Conn) StreamExists(ctx context.Context, stream string) (bool, error) {
	_, err := c.streamConfig(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// PutBlob stores data in the blobs bucket as the object name (any text),
// its chunks on $O.<bucket>.C.<nuid>, and returns its reference with
// content type contentType (the caller sets Part). nuid is one or more
// valid tokens joined by dots; it must be new: chunks are appended to its
// subject. The object is written in the Object Store format, so that any
// Object Store client reads it by name. Chunks written before a failure are
// left to expire with the bucket's TTL (this user may not purge).
func (c *Conn) PutBlob(ctx context.Context, name, nuid, contentType string, data []byte) (protocol.BlobRef, error) {
	bucket := c.names.BlobsBucket()
	for tok := range strings.SplitSeq(nuid, ".") {
		if !protocol.ValidToken(tok) {
			return protocol.BlobRef{}, fmt.Errorf("bus: blob nuid %q is not made of valid tokens", nuid)
		}
	}
	if name == "" {
		return protocol.BlobRef{}, errors.New("bus: blob name must not be empty")
	}
	chunkSubject := "$O." + bucket + ".C." + nuid
	chunk := min(BlobChunkSize, max(c.MaxPayload()-1024, 1024))
	sum := sha256.New()
	chunks := 0
	for off := 0; off < len(data); off += chunk {
		part := data[off:min(off+chunk, len(data))]
		sum.Write(part)
		if _, err := c.Publish(ctx, chunkSubject, part, nil, ""); err != nil {
			return protocol.BlobRef{}, fmt.Errorf("bus: blob %s: %w", name, err)
		}
		chunks++
	}
	digest := sum.Sum(nil)
	info := jetstream.ObjectInfo{
		ObjectMeta: jetstream.ObjectMeta{
			Name:    name,
			Headers: nats.Header{"Content-Type": {contentType}},
			Opts:    &jetstream.ObjectMetaOptions{ChunkSize: uint32(chunk)},
		},
		Bucket:  bucket,
		NUID:    nuid,
		Size:    uint64(len(data)),
		ModTime: time.Now().UTC(),
		Chunks:  uint32(chunks),
		Digest:  "SHA-256=" + base64.URLEncoding.EncodeToString(digest),
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return protocol.BlobRef{}, fmt.Errorf("bus: blob %s: %w", name, err)
	}
	metaSubject := "$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
	if _, err := c.Publish(ctx, metaSubject, meta, Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}, ""); err != nil {
		return protocol.BlobRef{}, fmt.Errorf("bus: blob %s: %w", name, err)
	}
	return protocol.BlobRef{Bucket: bucket, Name: name, NUID: nuid, Size: int64(len(data)),
		SHA256: hex.EncodeToString(digest), ContentType: contentType}, nil
}

// ReadBlob calls fn with each chunk of the blob of ref, in order, until the
// last one stored, reading them with an ordered consumer whose one filter is
// the chunk subject (so NATS permissions can bind it to a personality). It
// checks nothing: the caller verifies size and digest. A blob with no chunk
// stored (expired, or never written) is ErrNotFound, unless ref.Size is 0.
// An error of fn stops the read and is returned.
func (c *Conn) ReadBlob(ctx context.Context, ref *protocol.BlobRef, fn func([]byte) error) error {
	subject, err := ref.ChunkSubject()
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	stream := objStream(ref.Bucket)
	err = c.den.guard(ctx, apiConsumer(stream), func(ctx context.Context) error {
		cons, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		if err != nil {
			return err
		}
		remaining := cons.CachedInfo().NumPending
		if remaining == 0 {
			if ref.Size == 0 {
				return nil
			}
			return ErrNotFound
		}
		for remaining > 0 {
			batch, err := cons.Fetch(int(min(remaining, 64)), jetstream.FetchMaxWait(5*time.Second))
			if err != nil {
				return err
			}
			got := 0
			for m := range batch.Messages() {
				got++
				if err := fn(m.Data()); err != nil {
					return err
				}
				if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
					remaining = 0
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
				return err
			}
			if got == 0 {
				break // expired meanwhile: the caller's size check tells
			}
			if remaining > 0 {
				remaining -= min(remaining, uint64(got))
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("bus: read blob %s: %w", ref.Name, err)
	}
	return nil
}
