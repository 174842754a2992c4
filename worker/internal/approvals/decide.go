package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/capstanhq/capstan/internal/approval"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
)

// Policies gives the personality a decision request names.
type Policies interface {
	Current(ctx context.Context, id string) (*capability.Personality, error)
}

// Decider answers decision requests (protocol.ApprovalSubject and
// ApprovalSelfSubject): it checks who may decide, finds the hold, checks
// the arguments' hash and stores the decision, first one wins.
type Decider struct {
	Names    protocol.Names
	Store    Store
	Policies Policies
	// OpCtx bounds the request's bus operations.
	OpCtx func() (context.Context, context.CancelFunc)
	// Now is time.Now, replaced in tests.
	Now func() time.Time
}

// Handle is the request handler: its return is the reply's body.
func (d *Decider) Handle(subject string, data []byte) []byte {
	ctx, cancel := d.OpCtx()
	defer cancel()
	reply := d.decide(ctx, subject, data)
	b, _ := json.Marshal(reply)
	return b
}

func refused(format string, args ...any) approval.Reply {
	return approval.Reply{Error: fmt.Sprintf(format, args...)}
}

func (d *Decider) decide(ctx context.Context, subject string, data []byte) approval.Reply {
	self, personality, call, err := d.Names.ParseApprovalSubject(subject)
	if err != nil {
		return refused("%v", err)
	}
	var req approval.Request
	if err := json.Unmarshal(data, &req); err != nil {
		return refused("invalid decision request: %v", err)
	}
	if err := req.Check(); err != nil {
		return refused("invalid decision request: %v", err)
	}
	p, err := d.Policies.Current(ctx, personality)
	if err != nil {
		return refused("%v", err)
	}
	if r := mayDecide(p, self, req.By); r != "" {
		return refused("%s", r)
	}
	hold, err := d.Store.HoldOf(ctx, personality, call)
	if err != nil {
		return refused("cannot read the hold of call %s: %v", call, err)
	}
	if hold == nil {
		first, err := d.Store.Decision(ctx, personality, call)
		switch {
		case err != nil:
			return refused("cannot read the decision of call %s: %v", call, err)
		case first != nil:
			return refused("%s", approval.Already(first))
		}
		return refused("%s", approval.NotHeld(call))
	}
	if req.ArgsSHA256 != "" && req.ArgsSHA256 != hold.ArgsSHA256 {
		return refused("%s", approval.ErrMismatch)
	}
	dec := &approval.Decision{Decision: req.Decision, By: req.By, At: d.Now().UTC(), Reason: req.Reason,
		ArgsSHA256: hold.ArgsSHA256, Hold: *hold}
	first, won, err := d.Store.Decide(ctx, dec)
	if err != nil {
		return refused("cannot store the decision of call %s: %v", call, err)
	}
	if !won {
		return refused("%s", approval.Already(first))
	}
	// The consumer of decisions removes the hold too; removing it now
	// takes the call off the pending list at once.
	_ = d.Store.Unhold(ctx, personality, call)
	return approval.Reply{OK: true, Decision: dec.Decision, By: dec.By, At: dec.At}
}

// mayDecide returns why by may not decide the calls of p ("" when it may):
// a self request needs approval.self; an approver's request needs by in
// approval.approvers when the personality lists any.
func mayDecide(p *capability.Personality, self bool, by string) string {
	a := p.Approval
	if a == nil {
		return fmt.Sprintf("personality %s has no approval section", p.ID)
	}
	if self {
		if !a.Self {
			return fmt.Sprintf("personality %s does not let a caller approve its own calls (approval.self is false)", p.ID)
		}
		return ""
	}
	if len(a.Approvers) > 0 && !slices.Contains(a.Approvers, by) {
		return fmt.Sprintf("%s is not an approver of personality %s (approval.approvers)", by, p.ID)
	}
	return ""
}
