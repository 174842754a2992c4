package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/wire"
)

// BlobRef refers to a call's full output stored in the blobs bucket
// (docs/protocol.md, "Large outputs by reference"); Result.Blob holds it.
// Its fields are documented on wire.BlobRef.
type BlobRef = wire.BlobRef

// Blob errors, tested with errors.Is.
var (
	// ErrNoBlob: the result refers to no blob (its output was not cut, was
	// too small or too large to store, or blobs are off).
	ErrNoBlob = errors.New("the result refers to no blob")
	// ErrBlobNotFound: the blob is no longer stored (it expired with the
	// bucket's TTL) or was never completely stored.
	ErrBlobNotFound = errors.New("blob not found")
	// ErrBlobCorrupt: the stored bytes do not match the reference's size or
	// SHA-256.
	ErrBlobCorrupt = errors.New("blob does not match its reference")
)

// Blob opens the full output that r refers to (r.Blob), stored by the
// worker because the result message carries only a cut of it. Reading
// returns the blob's bytes as they arrive; the read that would return
// io.EOF first checks the size and the SHA-256 digest against the
// reference and returns an error wrapping ErrBlobCorrupt instead when
// either differs, so a caller that reads to the end never accepts corrupt
// data without an error. Close stops the read. The blob is read from its
// chunk subject, which a tenant's NATS user may read for its own
// personality only (deploy/nats/auth.conf). Without a reference the error
// wraps ErrNoBlob; a blob no longer stored fails its first Read with
// ErrBlobNotFound.
func (c *Client) Blob(ctx context.Context, r Result) (io.ReadCloser, error) {
	ref := r.Blob
	if ref == nil {
		return nil, fmt.Errorf("client: blob of %s: %w", r.CallID, ErrNoBlob)
	}
	if _, err := ref.ChunkSubject(); err != nil {
		return nil, fmt.Errorf("client: blob of %s: %w", r.CallID, err)
	}
	want, err := hex.DecodeString(ref.SHA256)
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("client: blob of %s: sha256 %q is not a hex SHA-256 digest", r.CallID, ref.SHA256)
	}
	rctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	go func() {
		var n int64
		err := c.conn.ReadBlob(rctx, ref, func(b []byte) error {
			if n += int64(len(b)); n > ref.Size {
				return fmt.Errorf("%w: more than its %d bytes are stored", ErrBlobCorrupt, ref.Size)
			}
			_, err := pw.Write(b)
			return err
		})
		if errors.Is(err, bus.ErrNotFound) {
			err = fmt.Errorf("%w: %s/%s (expired, or never completely stored)", ErrBlobNotFound, ref.Bucket, ref.Name)
		}
		pw.CloseWithError(err)
	}()
	return &blobReader{ref: ref, want: want, r: pr, sum: sha256.New(), cancel: cancel}, nil
}

// blobReader checks the bytes it passes on against the reference.
type blobReader struct {
	ref    *BlobRef
	want   []byte
	r      *io.PipeReader
	sum    hash.Hash
	n      int64
	cancel context.CancelFunc
}

func (b *blobReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.sum.Write(p[:n])
	b.n += int64(n)
	if errors.Is(err, io.EOF) {
		if b.n != b.ref.Size {
			return n, fmt.Errorf("client: blob %s/%s: %w: %d bytes stored, the reference says %d", b.ref.Bucket, b.ref.Name, ErrBlobCorrupt, b.n, b.ref.Size)
		}
		if got := b.sum.Sum(nil); hex.EncodeToString(got) != hex.EncodeToString(b.want) {
			return n, fmt.Errorf("client: blob %s/%s: %w: SHA-256 %x, the reference says %s", b.ref.Bucket, b.ref.Name, ErrBlobCorrupt, got, b.ref.SHA256)
		}
		return n, io.EOF
	}
	if err != nil {
		return n, fmt.Errorf("client: blob %s/%s: %w", b.ref.Bucket, b.ref.Name, err)
	}
	return n, nil
}

// Close stops the read.
func (b *blobReader) Close() error {
	b.cancel()
	return b.r.Close()
}
