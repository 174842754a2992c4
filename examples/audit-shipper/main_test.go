package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

// record is one audit record line as a worker writes it.
func record(callID string) string {
	return `{"time":"2026-01-02T03:04:05Z","call_id":"` + callID + `","batch_id":"b1","tool":"echo","decision":"allowed","ok":true,"duration_ms":1,"worker_id":"w1","args_sha256":"00","args_bytes":2}`
}

// TestShipsEveryRecordOnceAndResumes: the shipper writes every stored
// record, as stored, and a second run ships only what came since.
func TestShipsEveryRecordOnceAndResumes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := bustest.Server(t)
	conn := bustest.Conn(t, url, "")
	publish := func(lines ...string) {
		t.Helper()
		_, err := conn.Publish(ctx, "capstan.audit.echo", []byte(strings.Join(lines, "\n")+"\n"), nil, "")
		require.NoError(t, err)
	}
	publish(record("c1"), record("c2"), record("c3"))
	publish(record("c4"))
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	args := []string{"-url", url, "-nkey", bustest.Creds(url), "-drain", "-batch", "1", "-out", out}

	var stderr bytes.Buffer
	require.NoError(t, run(ctx, args, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "records shipped: 4")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	recs, err := wire.DecodeAuditRecords(data)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	require.Equal(t, record("c1")+"\n", strings.SplitAfter(string(data), "\n")[0], "written as stored")

	publish(record("c5"))
	stderr.Reset()
	require.NoError(t, run(ctx, args, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "records shipped: 1")
	data, err = os.ReadFile(out)
	require.NoError(t, err)
	recs, err = wire.DecodeAuditRecords(data)
	require.NoError(t, err)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.CallID)
	}
	require.Equal(t, []string{"c1", "c2", "c3", "c4", "c5"}, ids)
}

func TestWriteRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data, want, warn string
		n                      int
	}{
		{"batch", record("a") + "\n" + record("b") + "\n", record("a") + "\n" + record("b") + "\n", "", 2},
		{"one record without a final newline", record("a"), record("a") + "\n", "", 1},
		{"blank lines skipped", "\n" + record("a") + "\n\n", record("a") + "\n", "", 1},
		{"a line that is not a record is kept and reported", record("a") + "\nnot json\n", record("a") + "\nnot json\n", "audit message line 2", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var w, warn bytes.Buffer
			n, err := writeRecords(&w, &warn, []byte(tc.data))
			require.NoError(t, err)
			require.Equal(t, tc.n, n)
			require.Equal(t, tc.want, w.String())
			if tc.warn == "" {
				require.Empty(t, warn.String())
			} else {
				require.Contains(t, warn.String(), tc.warn)
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"positional", []string{"now"}, `unexpected argument "now"`},
		{"batch", []string{"-batch", "0"}, "-batch must be at least 1, got 0"},
		{"both credentials", []string{"-creds", "a", "-nkey", "b"}, "give -creds or -nkey, not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, run(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{}), tc.want)
		})
	}
}
