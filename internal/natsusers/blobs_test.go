package natsusers

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/workertest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// bigEcho calls echo with a text over the default 80,000-character budget
// as c, and returns its result: cut, with a blob holding the whole text.
func bigEcho(t *testing.T, c *client.Client, text string) client.Result {
	t.Helper()
	args, err := json.Marshal(map[string]string{"text": text})
	require.NoError(t, err)
	r := c.ExecuteParallel(ctxT(t, 30*time.Second), client.Turn{Wait: 20 * time.Second}, []client.Call{{Tool: "echo", SessionID: "s", Args: args}})[0]
	require.True(t, r.OK, "%s: %s", r.Code, r.Error)
	require.NotNil(t, r.Blob, "the worker stored the whole text")
	return r
}

// readBlob reads the blob of r as c.
func readBlob(t *testing.T, c *client.Client, r client.Result) ([]byte, error) {
	t.Helper()
	rd, err := c.Blob(ctxT(t, 30*time.Second), r)
	require.NoError(t, err)
	defer func() { _ = rd.Close() }()
	return io.ReadAll(rd)
}

// TestBlobsPerUser: the worker user writes blobs (the bucket created by the
// first user that may), each tenant reads its own personality's blobs only,
// the backend and the operator read every blob (the operator also by name
// with a plain Object Store client), and only the operator deletes one.
func TestBlobsPerUser(t *testing.T) {
	t.Parallel()
	url := deployServer(t)
	op := newClient(t, url, "operator") // creates the topology, capstan_blobs included
	for _, doc := range []string{"id: researcher\n", "id: support\n"} {
		_, _, err := op.PutPersonality(ctxT(t, 10*time.Second), []byte(doc))
		require.NoError(t, err)
	}
	workertest.Run(t, newWorker(t, url, nil), nil)
	a := newClient(t, url, "tenant-researcher")
	b := newClient(t, url, "tenant-support")
	textA, textB := strings.Repeat("researcher ", 10_000), strings.Repeat("support ", 15_000)
	ra, rb := bigEcho(t, a, textA), bigEcho(t, b, textB)
	require.Equal(t, "researcher/"+ra.CallID, ra.Blob.Name)
	require.True(t, strings.HasPrefix(rb.Blob.NUID, "support."), rb.Blob.NUID)

	// Each tenant reads its own blob ...
	got, err := readBlob(t, a, ra)
	require.NoError(t, err)
	require.Equal(t, textA, string(got))
	got, err = readBlob(t, b, rb)
	require.NoError(t, err)
	require.Equal(t, textB, string(got))
	// ... and not the other's, even with its reference in hand.
	_, err = readBlob(t, a, rb)
	require.ErrorIs(t, err, bus.ErrPermissionDenied)
	require.ErrorContains(t, err, `$O.capstan_blobs.C.support.`)

	// The backend and the operator read both.
	for _, user := range []string{"backend", "operator"} {
		c := newClient(t, url, user)
		for _, tc := range []struct {
			r    client.Result
			text string
		}{{ra, textA}, {rb, textB}} {
			got, err := readBlob(t, c, tc.r)
			require.NoError(t, err, user)
			require.Equal(t, tc.text, string(got), user)
		}
	}
	// The operator, with any Object Store client, by name.
	nc, err := nats.Connect(url, nats.UserInfo("operator", passwords["operator"]))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	obs, err := js.ObjectStore(ctxT(t, 10*time.Second), "capstan_blobs")
	require.NoError(t, err)
	byName, err := obs.GetBytes(ctxT(t, 10*time.Second), rb.Blob.Name)
	require.NoError(t, err)
	require.Equal(t, textB, string(byName))

	// What the server refuses, on the wire.
	metaB := "$O.capstan_blobs.M.c3VwcG9ydC8" // a metadata subject (names are base64)
	for _, tc := range []struct{ user, subject string }{
		// A tenant: the other's chunks, any metadata, the bucket's
		// stream information (it lists every subject), any write.
		{"tenant-researcher", "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs.peek.$O.capstan_blobs.C.support.>"},
		{"tenant-researcher", "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs.peek.$O.capstan_blobs.C.>"},
		{"tenant-researcher", "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs.peek.$O.capstan_blobs.M.>"},
		{"tenant-researcher", "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs"},
		{"tenant-researcher", "$JS.API.DIRECT.GET.OBJ_capstan_blobs." + metaB},
		{"tenant-researcher", "$JS.API.DIRECT.GET.OBJ_capstan_blobs"},
		{"tenant-researcher", "$JS.API.STREAM.MSG.GET.OBJ_capstan_blobs"},
		{"tenant-researcher", "$JS.API.STREAM.INFO.OBJ_capstan_blobs"},
		{"tenant-researcher", "$O.capstan_blobs.C.researcher.x"},
		// The worker writes blobs but reads none, and deletes none.
		{"worker", "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs.peek.$O.capstan_blobs.C.>"},
		{"worker", "$JS.API.STREAM.PURGE.OBJ_capstan_blobs"},
		// The backend reads but never deletes or writes.
		{"backend", "$JS.API.STREAM.PURGE.OBJ_capstan_blobs"},
		{"backend", metaB},
		{"backend", "$O.capstan_blobs.C.support.x"},
	} {
		t.Run("refused "+tc.user+" "+tc.subject, func(t *testing.T) {
			dialRaw(t, url, tc.user).requireRefused(t, tc.subject, []byte(`{}`))
		})
	}

	// The operator deletes a blob; its reference then finds nothing.
	require.NoError(t, obs.Delete(ctxT(t, 10*time.Second), ra.Blob.Name))
	_, err = readBlob(t, a, ra)
	require.ErrorIs(t, err, client.ErrBlobNotFound)
}
