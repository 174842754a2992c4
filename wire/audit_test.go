package wire_test

import (
	"fmt"
	"testing"

	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

func TestDecodeAuditRecords(t *testing.T) {
	t.Parallel()
	one := `{"time":"2026-11-22T13:56:38Z","call_id":"c-1","batch_id":"b","tool":"echo","decision":"allowed","ok":true,"duration_ms":3,"worker_id":"w","deliveries":1,"args_sha256":"ab","args_bytes":12}`
	two := `{"time":"2026-11-22T13:56:39Z","call_id":"c-2","batch_id":"b","tool":"echo","decision":"schema","ok":false,"code":"input_invalid","duration_ms":0,"worker_id":"w","args_sha256":"cd","args_bytes":3,"denials":["HOST_NOT_ALLOWED"]}`
	for _, tc := range []struct {
		name    string
		data    string
		calls   []string
		wantErr string
	}{
		{"a batch", one + "\n" + two + "\n", []string{"c-1", "c-2"}, ""},
		{"one record without a final newline", one, []string{"c-1"}, ""},
		{"blank lines", "\n" + one + "\n\n", []string{"c-1"}, ""},
		{"empty", "", nil, ""},
		{"a bad line", one + "\n{not json}\n" + two + "\n", []string{"c-1"}, "audit message line 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			recs, err := wire.DecodeAuditRecords([]byte(tc.data))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.CallID)
			}
			require.Equal(t, tc.calls, ids)
		})
	}
	recs, err := wire.DecodeAuditRecords([]byte(two))
	require.NoError(t, err)
	require.Equal(t, wire.CodeInputInvalid, recs[0].Code)
	require.Equal(t, []string{"HOST_NOT_ALLOWED"}, recs[0].Denials)
	require.Equal(t, "schema", recs[0].Decision)
}

// An audit consumer reads the records of each message of the audit stream
// (<prefix>.audit.<tool>, stream CAPSTAN_AUDIT) line by line.
func ExampleDecodeAuditRecords() {
	msg := []byte(`{"time":"2026-11-22T13:56:38Z","call_id":"c-1","batch_id":"c-1","tool":"echo","decision":"allowed","ok":true,"duration_ms":3,"worker_id":"worker-1","args_sha256":"fcd1","args_bytes":12}
{"time":"2026-11-22T13:56:38Z","call_id":"c-2","batch_id":"c-2","tool":"echo","decision":"exclude_tools","ok":false,"code":"not_available","duration_ms":0,"worker_id":"worker-1","args_sha256":"fcd1","args_bytes":12}
`)
	recs, err := wire.DecodeAuditRecords(msg)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Println(r.CallID, r.Tool, r.Decision, r.OK)
	}
	// Output:
	// c-1 echo allowed true
	// c-2 echo exclude_tools false
}
