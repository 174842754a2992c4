package protocol_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/wire"
	"github.com/stretchr/testify/require"
)

// encodeAuditRecordStd is EncodeAuditRecord as it was written with
// encoding/json, kept as the reference the hand-written encoder must match
// byte for byte, errors included.
func encodeAuditRecordStd(dst []byte, rec *protocol.AuditRecord) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return dst, err
	}
	dst = append(dst, b...)
	return append(dst, '\n'), nil
}

// checkAudit asserts that EncodeAuditRecord appends what the reference
// appends, or fails with the same message leaving dst as it was.
func checkAudit(t *testing.T, rec *protocol.AuditRecord) {
	t.Helper()
	const prefix = "{\"earlier\":1}\n"
	want, wantErr := encodeAuditRecordStd([]byte(prefix), rec)
	got, err := protocol.EncodeAuditRecord([]byte(prefix), rec)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error())
		require.Equal(t, prefix, string(got))
		return
	}
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
	fresh, err := protocol.EncodeAuditRecord(nil, rec)
	require.NoError(t, err)
	require.Equal(t, string(want[len(prefix):]), string(fresh))
}

func TestEncodeAuditRecordMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	nasty := "<b>\"q\"</b> & \\ \u2028\u2029 \b\f\n\r\t \x00\x01\x1f\x7f é 🚀 \xff \xe2\x80 \xed\xa0\x80 \xc0\xaf"
	when := time.Date(2026, 11, 22, 13, 56, 38, 123456789, time.UTC)
	all := protocol.AuditRecord{Time: when, CallID: "c", BatchID: "b", SessionID: "s", PersonalityID: "p", Tool: "echo",
		Decision: protocol.DecisionPermission, Denials: []string{"HOST_NOT_ALLOWED", "PATH_DENIED"}, DenialsOmitted: 3, OK: true,
		Code: wire.CodeNotAvailable, DurationMS: 3, WorkerID: "w", Deliveries: 2, ArgsSHA256: "ab", ArgsBytes: 12,
		ResultBytes: 300, BlobBytes: 1 << 40, BlobSHA256: "cd",
		Approval: &wire.ApprovalStamp{Decision: "approved", By: "alice", At: when, ArgsSHA256: "ef", Reason: "looks fine"}}
	with := func(f func(*protocol.AuditRecord)) protocol.AuditRecord { r := all; f(&r); return r }
	for _, tc := range []struct {
		name string
		rec  protocol.AuditRecord
	}{
		{"zero", protocol.AuditRecord{}},
		{"every field", all},
		{"required fields only", protocol.AuditRecord{Time: when, CallID: "c", BatchID: "b", Tool: "echo", Decision: "allowed", WorkerID: "w", ArgsSHA256: "ab"}},
		{"nasty strings everywhere", protocol.AuditRecord{Time: when, CallID: nasty, BatchID: nasty, SessionID: nasty, PersonalityID: nasty,
			Tool: nasty, Decision: nasty, Denials: []string{nasty, "", nasty}, Code: wire.Code(nasty), WorkerID: nasty, ArgsSHA256: nasty, BlobSHA256: nasty}},
		{"approval without by and reason", with(func(r *protocol.AuditRecord) { r.Approval = &wire.ApprovalStamp{Decision: "expired", At: when} })},
		{"approval with nasty strings", with(func(r *protocol.AuditRecord) {
			r.Approval = &wire.ApprovalStamp{Decision: nasty, By: nasty, At: when, ArgsSHA256: nasty, Reason: nasty}
		})},
		{"approval time year 10000", with(func(r *protocol.AuditRecord) {
			r.Approval = &wire.ApprovalStamp{Decision: "denied", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
		})},
		{"empty denials are left out", with(func(r *protocol.AuditRecord) { r.Denials = []string{} })},
		{"nil denials are left out", with(func(r *protocol.AuditRecord) { r.Denials = nil })},
		{"one empty denial", with(func(r *protocol.AuditRecord) { r.Denials = []string{""} })},
		{"negative numbers", with(func(r *protocol.AuditRecord) {
			r.DenialsOmitted, r.DurationMS, r.Deliveries, r.ArgsBytes, r.ResultBytes, r.BlobBytes = -1, math.MinInt64, math.MinInt, -2, -3, -4
		})},
		{"largest numbers", with(func(r *protocol.AuditRecord) {
			r.DenialsOmitted, r.DurationMS, r.Deliveries, r.ArgsBytes, r.ResultBytes, r.BlobBytes = math.MaxInt, math.MaxInt64, math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt64
		})},
		{"time with a zone", with(func(r *protocol.AuditRecord) { r.Time = when.In(time.FixedZone("X", -(3*3600 + 30*60))) })},
		{"time in local time", with(func(r *protocol.AuditRecord) { r.Time = when.Local() })},
		{"time with a monotonic reading", with(func(r *protocol.AuditRecord) { r.Time = time.Now() })},
		{"time without fraction", with(func(r *protocol.AuditRecord) { r.Time = when.Truncate(time.Second) })},
		{"time year 9999", with(func(r *protocol.AuditRecord) { r.Time = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC) })},
		{"time year 10000", with(func(r *protocol.AuditRecord) { r.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) })},
		{"time year -1", with(func(r *protocol.AuditRecord) { r.Time = time.Date(-1, 6, 1, 0, 0, 0, 0, time.UTC) })},
		{"time offset of 24 hours", with(func(r *protocol.AuditRecord) { r.Time = when.In(time.FixedZone("Z", 24*3600)) })},
		{"time offset of 23:59", with(func(r *protocol.AuditRecord) { r.Time = when.In(time.FixedZone("Z", -(24*3600 - 60))) })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkAudit(t, &tc.rec)
		})
	}
}

func FuzzAuditRecordMatchesEncodingJSON(f *testing.F) {
	f.Add(int64(1795874198), int64(123456789), 0, true, "c-1", "b-1", "s", "p", "echo", "allowed", "", int8(0), 0, true, "",
		int64(3), "w-1", 1, "ab", 12, 300, int64(0), "")
	f.Add(int64(253402300800), int64(0), 3600, false, "c\x00", "b\xff", "", "", "t\u2028", "schema", "HOST<&>,\n,", int8(2), 70, false,
		"input_invalid", int64(-1), "", 0, "", 0, 0, int64(5), "cd")
	f.Add(int64(-62135596801), int64(-1), 86400, false, "", "", "", "", "", "", "", int8(1), -1, false, "",
		int64(0), "", -3, "", -1, -1, int64(-1), "")
	f.Fuzz(func(t *testing.T, sec, nsec int64, offset int, utc bool, callID, batchID, sessionID, personalityID, tool, decision,
		denials string, denialsMode int8, denialsOmitted int, ok bool, code string, duration int64, workerID string, deliveries int,
		argsSHA string, argsBytes, resultBytes int, blobBytes int64, blobSHA string) {
		tm := time.Unix(sec, nsec)
		if utc {
			tm = tm.UTC()
		} else {
			tm = tm.In(time.FixedZone(sessionID, offset))
		}
		rec := protocol.AuditRecord{Time: tm, CallID: callID, BatchID: batchID, SessionID: sessionID, PersonalityID: personalityID,
			Tool: tool, Decision: decision, DenialsOmitted: denialsOmitted, OK: ok, Code: wire.Code(code), DurationMS: duration,
			WorkerID: workerID, Deliveries: deliveries, ArgsSHA256: argsSHA, ArgsBytes: argsBytes, ResultBytes: resultBytes,
			BlobBytes: blobBytes, BlobSHA256: blobSHA}
		switch denialsMode % 3 {
		case 1:
			rec.Denials = []string{}
		case 2, -2:
			rec.Denials = strings.Split(denials, ",")
		}
		checkAudit(t, &rec)
	})
}

// benchAuditRecord is the audit record of an allowed echo call.
func benchAuditRecord() protocol.AuditRecord {
	return protocol.AuditRecord{Time: time.Date(2026, 11, 22, 13, 56, 38, 123456789, time.UTC),
		CallID: "01JD8X3K4M5N6P7Q8R9S", BatchID: "01JD8X3K4M5N6P7Q8R9T", SessionID: "session-42", PersonalityID: "coder",
		Tool: "echo", Decision: protocol.DecisionAllowed, OK: true, DurationMS: 3, WorkerID: "worker-7f9c2d-host-12",
		Deliveries: 1, ArgsSHA256: strings.Repeat("9f86d081884c7d65", 4), ArgsBytes: 1037, ResultBytes: 1154}
}

// BenchmarkEncodeAuditRecord compares EncodeAuditRecord with the
// json.Marshal it replaced, appending to a fresh slice as the worker does.
func BenchmarkEncodeAuditRecord(b *testing.B) {
	rec := benchAuditRecord()
	for _, bc := range []struct {
		name   string
		encode func([]byte, *protocol.AuditRecord) ([]byte, error)
	}{{"encoding-json", encodeAuditRecordStd}, {"appender", protocol.EncodeAuditRecord}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.encode(nil, &rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
