package client_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/stretchr/testify/require"
)

// TestBlobRoundTrip: a value longer than the budget comes back cut, with a
// blob holding it whole; the client reads the blob and checks its digest,
// and reports a blob whose stored bytes or reference do not match.
func TestBlobRoundTrip(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload))
	startWorker(t, url)
	c := newClient(t, url, "")
	text := strings.Repeat("0123456789", 20_000) // 200,000 characters; the budget is 80,000
	args, err := json.Marshal(map[string]string{"text": text})
	require.NoError(t, err)
	res := c.ExecuteParallel(ctxT(t), client.Turn{}, []client.Call{
		{Tool: "echo", SessionID: "s", Args: args},
		{Tool: "echo", SessionID: "s", Args: json.RawMessage(`{"text":"short"}`)},
	})
	r := res[0]
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.True(t, r.Truncated)
	require.Equal(t, 200_000, r.OriginalChars)
	require.NotNil(t, r.Blob)
	require.Equal(t, protocol.BlobPartValue, r.Blob.Part)
	require.Equal(t, int64(len(text)), r.Blob.Size)

	rd, err := c.Blob(ctxT(t), r)
	require.NoError(t, err)
	got, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.NoError(t, rd.Close())
	require.True(t, string(got) == text, "the whole value")

	// A result without a blob.
	_, err = c.Blob(ctxT(t), res[1])
	require.ErrorIs(t, err, client.ErrNoBlob)

	// A reference whose digest is not the stored bytes'.
	wrong := r
	ref := *r.Blob
	ref.SHA256 = strings.Repeat("0", 64)
	wrong.Blob = &ref
	_, err = readAll(t, c, wrong)
	require.ErrorIs(t, err, client.ErrBlobCorrupt)
	require.ErrorContains(t, err, "SHA-256")

	// A reference to chunks that are not stored.
	gone := r
	ref = *r.Blob
	ref.NUID = "default.NOTSTORED"
	gone.Blob = &ref
	_, err = readAll(t, c, gone)
	require.ErrorIs(t, err, client.ErrBlobNotFound)

	// Stored bytes changed behind the reference: one more chunk.
	subject, err := r.Blob.ChunkSubject()
	require.NoError(t, err)
	_, err = bustest.Conn(t, url, "").Publish(ctxT(t), subject, []byte("tampered"), nil, "")
	require.NoError(t, err)
	_, err = readAll(t, c, r)
	require.ErrorIs(t, err, client.ErrBlobCorrupt)
}

func readAll(t *testing.T, c *client.Client, r client.Result) ([]byte, error) {
	t.Helper()
	rd, err := c.Blob(ctxT(t), r)
	require.NoError(t, err)
	defer func() { require.NoError(t, rd.Close()) }()
	return io.ReadAll(rd)
}
