package callexec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
)

// emitter returns the call's Emit function: it validates the event, applies
// the internal default audience, numbers it and publishes it on
// <p>.progress.<audience>.<personality>.<batch>.<call>.
// Secret values the call resolved, and their encoded forms, are redacted
// from the message.
func (s *Services) emitter(call *protocol.Call, tc *tool.Context) func(tool.Progress) error {
	var seq atomic.Int64
	// The call's redactor, built again only once the call resolved another secret.
	var red atomic.Pointer[shape.Redactor]
	batch := call.EffectiveBatchID()
	return func(p tool.Progress) error {
		aud := protocol.Audience(cmp.Or(string(p.Audience), string(protocol.AudienceInternal)))
		if !aud.Valid() {
			return fmt.Errorf("%w: audience %q must be internal, user or dashboard", tool.ErrInvalidProgress, p.Audience)
		}
		if p.Percent != nil && (math.IsNaN(*p.Percent) || *p.Percent < 0 || *p.Percent > 100) {
			return fmt.Errorf("%w: percent %v must be between 0 and 100", tool.ErrInvalidProgress, *p.Percent)
		}
		subject, err := s.names.ProgressSubject(aud, call.PersonalityID, batch, call.CallID)
		if err != nil {
			return err
		}
		r := red.Load().With(secretValues(tc))
		red.Store(r)
		// Redacted, then capped at ProgressMaxChars.
		msg, _, _ := shape.Trim(s.creds.Redact(r.Redact(p.Message)), ProgressMaxChars)
		ev := protocol.Progress{Type: protocol.ProgressType, CallID: call.CallID, BatchID: batch, ToolName: call.Tool,
			Message: msg, Percent: p.Percent, Audience: aud, Seq: seq.Add(1), Time: time.Now().UTC()}
		data, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		ctx, cancel := s.opCtx()
		defer cancel()
		if _, err := s.bus.Publish(ctx, subject, data, bus.Header{protocol.HeaderProtocol: {protocol.Version}}, ""); err != nil {
			reason, _ := s.publishFault(err, s.names.ProgressStream())
			s.obs.PublishFailed(ctx, "progress", reason)
			return fmt.Errorf("%w: progress event not published: %v", tool.ErrUnavailable, err)
		}
		return nil
	}
}
