package explain

import (
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
)

// Values of ApprovalView.Required.
const (
	// ApprovalAlways: every call of the tool waits for a decision.
	ApprovalAlways = "always"
	// ApprovalWhen: the calls whose arguments match one of When wait.
	ApprovalWhen = "when"
)

// ApprovalView is what a personality's approval section (docs/approvals.md)
// asks of the calls of one tool: whether they wait for a person's decision
// before they run, always or for some arguments, for how long, and who may
// decide.
type ApprovalView struct {
	// Required is ApprovalAlways when a rule without when names the tool,
	// else ApprovalWhen.
	Required string `json:"required"`
	// When lists, for ApprovalWhen, the when of every rule that names the
	// tool, in document order: a call waits when its arguments match one
	// of them (all the arguments of one, each equal to one of its values).
	// Absent for ApprovalAlways.
	When []map[string][]any `json:"when,omitempty"`
	// Timeout is how long a held call waits for a decision ("1h", "1h30m").
	Timeout string `json:"timeout"`
	// Approvers names who may decide; empty: any user with approval rights.
	Approvers []string `json:"approvers"`
	// Self is approval.self: the caller's own session may decide.
	Self bool `json:"self"`
}

// Approval returns the approval view of the calls of tool under p: nil
// when p has no approval section or no rule of it matches tool
// (capability.ApprovalRule.Matches), so that no call of tool ever waits
// for a decision, whatever its arguments.
func Approval(p *capability.Personality, tool string) *ApprovalView {
	a := p.Approval
	if a == nil {
		return nil
	}
	var v *ApprovalView
	for _, r := range a.Require {
		if !r.Matches(tool) {
			continue
		}
		if v == nil {
			v = &ApprovalView{Required: ApprovalWhen, Timeout: capability.FormatTimeout(a.TimeoutOrDefault()),
				Approvers: list(a.Approvers), Self: a.Self}
		}
		if len(r.When) == 0 {
			v.Required, v.When = ApprovalAlways, nil
			break
		}
		v.When = append(v.When, r.When)
	}
	return v
}

// String is the view as explain prints it: "required when method is POST
// or DELETE (timeout 1h, approvers oncall)", "required (timeout 1h, any
// approver)"; several conditions are joined by ", or when "; ",
// self-approval on" ends the brackets when the caller's session may decide.
func (v *ApprovalView) String() string {
	conds := make([]string, len(v.When))
	for i, w := range v.When {
		conds[i] = capability.ApprovalRule{When: w}.Condition()
	}
	s := "required"
	if len(conds) > 0 && v.Required == ApprovalWhen {
		s += " when " + strings.Join(conds, ", or when ")
	}
	s += " (timeout " + v.Timeout + ", " + capability.FormatApprovers(v.Approvers)
	if v.Self {
		s += ", self-approval on"
	}
	return s + ")"
}
