package bus_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// blobData is 1 MB of fixed, non-repeating-per-chunk bytes.
func blobData() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 1_000_000; i++ {
		b.WriteString(strings.Repeat(string(rune('a'+i%26)), 97))
		b.WriteByte(0)
	}
	return b.Bytes()[:1_000_000]
}

func TestBlobRoundTripAndObjectStoreFormat(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload))
	c := bustest.Conn(t, url, "")
	data := blobData()
	ref, err := c.PutBlob(ctxT(t), "researcher/call1", "researcher.TOKEN1", protocol.BlobTypeText, data)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	require.Equal(t, protocol.BlobRef{Bucket: "capstan_blobs", Name: "researcher/call1", NUID: "researcher.TOKEN1",
		Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:]), ContentType: protocol.BlobTypeText}, ref)

	var got bytes.Buffer
	require.NoError(t, c.ReadBlob(ctxT(t), &ref, func(b []byte) error { _, err := got.Write(b); return err }))
	require.Equal(t, data, got.Bytes())

	// Any Object Store client reads it by name, digest checked by nats.go.
	nc, err := nats.Connect(url, nkey(t, url))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	obs, err := js.ObjectStore(ctxT(t), "capstan_blobs")
	require.NoError(t, err)
	res, err := obs.Get(ctxT(t), "researcher/call1")
	require.NoError(t, err)
	viaStore, err := io.ReadAll(res)
	require.NoError(t, err)
	require.Equal(t, data, viaStore)
	info, err := res.Info()
	require.NoError(t, err)
	require.Equal(t, protocol.BlobTypeText, info.Headers.Get("Content-Type"))
	require.Equal(t, uint32(8), info.Chunks, "128 KiB chunks")

	// The bucket: an Object Store bucket that outlives the results.
	st, err := js.Stream(ctxT(t), "OBJ_capstan_blobs")
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.Equal(t, 24*60*60*1e9+bus.BlobTTLMargin.Nanoseconds(), cfg.MaxAge.Nanoseconds())
	require.True(t, cfg.AllowRollup)
	require.ElementsMatch(t, []string{"$O.capstan_blobs.C.>", "$O.capstan_blobs.M.>"}, cfg.Subjects)

	// A blob with no chunk stored.
	missing := ref
	missing.NUID = "researcher.GONE"
	err = c.ReadBlob(ctxT(t), &missing, func([]byte) error { return nil })
	require.ErrorIs(t, err, bus.ErrNotFound)
	bad := ref
	bad.NUID = "researcher.>"
	require.ErrorContains(t, c.ReadBlob(ctxT(t), &bad, func([]byte) error { return nil }), "must be <personality>.<token>")
}

func TestPublishTooLargeIsRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t, bustest.MaxPayload(bustest.StockMaxPayload))
	c := bustest.Conn(t, url, "")
	require.Equal(t, bustest.StockMaxPayload, c.MaxPayload())
	hdr := bus.Header{"Capstan-Protocol": {"2"}}
	// Exactly at the limit, headers and message id included: accepted.
	size := bus.MessageSize(0, hdr, "m1")
	_, err := c.Publish(ctxT(t), "capstan.audit.x", make([]byte, bustest.StockMaxPayload-size), hdr, "m1")
	require.NoError(t, err)
	// One byte more: refused by the client, never retried in vain.
	_, err = c.Publish(ctxT(t), "capstan.audit.x", make([]byte, bustest.StockMaxPayload-size+1), hdr, "m2")
	require.ErrorIs(t, err, bus.ErrTooLarge)
	require.ErrorContains(t, err, "message of 1.0 MB exceeds the server's 1 MiB message limit")
}

func TestPublishToNoStream(t *testing.T) {
	t.Parallel()
	url := bustest.Server(t)
	c := bustest.Conn(t, url, "")
	_, err := c.Publish(ctxT(t), "nowhere.x", []byte("x"), nil, "")
	require.ErrorIs(t, err, bus.ErrNoStream)
	ok, err := c.StreamExists(ctxT(t), "NOWHERE")
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = c.StreamExists(ctxT(t), "CAPSTAN_RESULTS")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestFormatBytes(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{
		0: "0 bytes", 999: "999 bytes", 1000: "1.0 kB", 1024: "1 KiB", 1 << 20: "1 MiB", 8 << 20: "8 MiB",
		6_700_000: "6.7 MB", 6_712_345: "6.7 MB", 1_048_577: "1.0 MB",
	} {
		require.Equal(t, want, bus.FormatBytes(n), "%d", n)
	}
}
