package bus

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecodePubAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want *jetstream.PubAck
		code jetstream.ErrorCode // the refusal's error code, if any
		err  error
	}{
		{name: "ack", in: `{"stream":"CAPSTAN_RESULTS","seq":42}`, want: &jetstream.PubAck{Stream: "CAPSTAN_RESULTS", Sequence: 42}},
		{name: "duplicate", in: `{"stream":"S","seq":7,"duplicate":true,"domain":"hub"}`, want: &jetstream.PubAck{Stream: "S", Sequence: 7, Duplicate: true, Domain: "hub"}},
		{name: "unknown members ignored", in: `{"stream":"S","seq":1,"batch":"b","count":3}`, want: &jetstream.PubAck{Stream: "S", Sequence: 1}},
		{name: "wrong last sequence", in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`, code: jetstream.JSErrCodeStreamWrongLastSequence},
		{name: "too large", in: `{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`, code: 10054},
		{name: "not JSON", in: `+OK`, err: jetstream.ErrInvalidJSAck},
		{name: "no stream", in: `{"seq":1}`, err: jetstream.ErrInvalidJSAck},
		{name: "empty", in: ``, err: jetstream.ErrInvalidJSAck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack, err := decodePubAck([]byte(tc.in))
			switch {
			case tc.code != 0:
				var apiErr *jetstream.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, tc.code, apiErr.ErrorCode)
				assert.Nil(t, ack)
			case tc.err != nil:
				assert.ErrorIs(t, err, tc.err)
				assert.Nil(t, ack)
			default:
				require.NoError(t, err)
				assert.Equal(t, tc.want, ack)
			}
		})
	}
	// The sentinels the publish errors are told apart by still match.
	_, err := decodePubAck([]byte(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`))
	assert.ErrorIs(t, err, jetstream.ErrStreamMessageExceedsMaximum)
	_, err = decodePubAck([]byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`))
	assert.True(t, wrongLastSequence(err))
}

// FuzzDecodePubAck checks decodePubAck against what jetstream.PublishMsg
// decodes (encoding/json into the same shape), on what a server may write
// (strictWithExactNames): a refusal or an ack is read the same, and what
// decodePubAck finds no answer in, the old decoding did not read as an ack
// either.
func FuzzDecodePubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"S","seq":42}`,
		`{"stream":"S","seq":7,"duplicate":true,"domain":"hub","val":"x"}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"}}`,
		`{"error":null,"stream":"S","seq":1}`,
		`{"stream":"","seq":1}`,
		`{"seq":-1,"stream":"S"}`,
		`[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ack, err := decodePubAck(data)
		if !strictWithExactNames(data) {
			// Not what a server writes; it must only not crash, and
			// nothing the stricter decoding refuses is an ack.
			return
		}
		var old struct {
			Error *jetstream.APIError `json:"error,omitempty"`
			*jetstream.PubAck
		}
		oldErr := json.Unmarshal(data, &old)
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr):
			require.NoError(t, oldErr)
			require.NotNil(t, old.Error)
			assert.Equal(t, *old.Error, *apiErr)
		case err != nil:
			require.ErrorIs(t, err, jetstream.ErrInvalidJSAck)
			ackRead := oldErr == nil && old.Error == nil && old.PubAck != nil && old.Stream != ""
			assert.False(t, ackRead, "refused an ack the old decoding read: %q", data)
		default:
			require.NoError(t, oldErr, "accepted what the old decoding refused: %q", data)
			require.Nil(t, old.Error)
			require.NotNil(t, old.PubAck)
			assert.Equal(t, *old.PubAck, *ack)
		}
	})
}

// strictWithExactNames reports whether data is valid UTF-8 JSON with no
// duplicate member names in any object, and no member name that differs
// from an ack's only in case (encoding/json matches names regardless of
// case, encoding/json/v2 exactly; a server writes them exactly).
func strictWithExactNames(data []byte) bool {
	if err := jsonv2.Unmarshal(data, new(any)); err != nil {
		return false
	}
	names := []string{"stream", "seq", "duplicate", "domain", "val", "error", "code", "err_code", "description"}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return true
		}
		if tok.Kind() != '"' || dec.StackDepth() == 0 {
			continue
		}
		if kind, n := dec.StackIndex(dec.StackDepth()); kind != '{' || n%2 == 0 {
			continue
		}
		name := tok.String()
		for _, known := range names {
			if strings.EqualFold(name, known) && name != known {
				return false
			}
		}
	}
}

// BenchmarkDecodePubAck compares the ack's decoding with what
// jetstream.PublishMsg does (encoding/json into its response type).
func BenchmarkDecodePubAck(b *testing.B) {
	ack := []byte(`{"stream":"CAPSTAN_RESULTS","seq":1234567}`)
	b.Run("v2", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePubAck(ack); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var resp struct {
				Error *jetstream.APIError `json:"error,omitempty"`
				*jetstream.PubAck
			}
			if err := json.Unmarshal(ack, &resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}
