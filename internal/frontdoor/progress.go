package frontdoor

import (
	"context"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/protocol"
)

// After a result, progress events published before it may still be on their
// way (they travel on another stream): the relay forwards what arrives until
// none came for progressQuiet, at most progressDrainMax.
const (
	progressQuiet    = 150 * time.Millisecond
	progressDrainMax = time.Second
)

// progressRelay forwards the user-audience progress events of one call as
// MCP progress notifications. A nil *progressRelay does nothing.
type progressRelay struct {
	ctx    context.Context // routes the notifications to the request's response stream
	ss     *mcp.ServerSession
	token  any
	events chan struct{} // signalled (without blocking) per forwarded event

	mu   sync.Mutex
	done bool
	last float64 // progress value of the last notification sent
}

// newProgressRelay returns the relay of a request's progress notifications,
// or nil when the request carries no progress token.
func newProgressRelay(ctx context.Context, req *mcp.CallToolRequest) *progressRelay {
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	return &progressRelay{ctx: ctx, ss: req.Session, token: token, events: make(chan struct{}, 1), last: -1}
}

// follow calls each handler with every user-audience progress event of call
// callID, on one goroutine, from the first stored event on, until stop is
// called. Only the `user` audience is followed: internal and dashboard
// events never leave Capstan.
func (p *personalityServer) follow(ctx context.Context, callID string, handlers ...func(client.Progress)) (stop func(), err error) {
	// The call's batch is its own id (Submit leaves batch_id empty).
	return p.c.Progress(ctx, protocol.AudienceUser, callID, true, func(ev client.Progress) {
		if ev.CallID != callID {
			return
		}
		for _, h := range handlers {
			h(ev)
		}
	})
}

// forward sends one event as notifications/progress with the request's
// token.
//
// An event with a percentage p is sent as progress p of total 100; one
// without, as progress <seq> (the event's sequence number) with no total.
// MCP requires progress to increase, so an event whose value would not
// exceed the last one sent (a tool mixing both kinds, or a repeat from a
// redelivered call) is not forwarded.
func (r *progressRelay) forward(ev client.Progress) {
	if r == nil {
		return
	}
	n := &mcp.ProgressNotificationParams{ProgressToken: r.token, Progress: float64(ev.Seq), Message: ev.Message}
	if ev.Percent != nil {
		n.Progress, n.Total = *ev.Percent, 100
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || n.Progress <= r.last {
		return
	}
	r.last = n.Progress
	_ = r.ss.NotifyProgress(r.ctx, n)
	select {
	case r.events <- struct{}{}:
	default:
	}
}

// drain forwards the events still arriving after the result: it returns once
// none arrived for progressQuiet, at most progressDrainMax after it started.
func (r *progressRelay) drain() {
	if r == nil {
		return
	}
	quiet := time.NewTimer(progressQuiet)
	defer quiet.Stop()
	limit := time.NewTimer(progressDrainMax)
	defer limit.Stop()
	for {
		select {
		case <-r.events:
			quiet.Reset(progressQuiet)
		case <-quiet.C:
			return
		case <-limit.C:
			return
		}
	}
}

// stop ends the relay; no notification is sent after it returns.
func (r *progressRelay) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
}
