package capability

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Approval is a personality's approval section (docs/capabilities.md,
// "Approval"; docs/approvals.md): which calls a person must approve before
// they run, how long such a call waits for a decision, and who may decide.
// It is policy, so only the operator's document sets it.
type Approval struct {
	// Require lists the rules; a call that matches one of them (Needs) is
	// held until it is decided. Empty: no call needs approval.
	Require []ApprovalRule
	// Timeout is how long a held call waits for a decision before it
	// expires: DefaultApprovalTimeout when the document sets none, else
	// from 1s to MaxApprovalTimeout. A zero Timeout (an Approval built in
	// code) means DefaultApprovalTimeout (TimeoutOrDefault).
	Timeout time.Duration
	// Approvers names who may decide; nil or empty: any user with approval
	// rights.
	Approvers []string
	// Self lets the caller's own session decide (MCP elicitation, client API).
	Self bool
}

// ApprovalRule is one entry of approval.require: calls of a tool, and
// optionally only those whose arguments have certain values.
type ApprovalRule struct {
	// Tool is a tool name, exact, or a prefix followed by a trailing "*"
	// ("mcp__github__*"; "*" alone matches every tool). See Matches.
	Tool string
	// When maps a top-level argument name to the values that make the rule
	// match; nil: the rule matches every call of Tool. Values are string,
	// json.Number or bool, as Parse reads them (an Approval built in code
	// may also use int, int64 and float64). See Approval.Needs.
	When map[string][]any
}

// Bounds and default of Approval.Timeout.
const (
	// DefaultApprovalTimeout is the timeout of an approval section that sets none.
	DefaultApprovalTimeout = time.Hour
	// MinApprovalTimeout is the shortest timeout a document may set.
	MinApprovalTimeout = time.Second
	// MaxApprovalTimeout is the longest timeout a document may set.
	MaxApprovalTimeout = 168 * time.Hour
)

// TimeoutOrDefault returns a.Timeout, or DefaultApprovalTimeout when it is
// zero or negative (an Approval built in code rather than by Parse, which
// always sets it).
func (a *Approval) TimeoutOrDefault() time.Duration {
	if a == nil || a.Timeout <= 0 {
		return DefaultApprovalTimeout
	}
	return a.Timeout
}

// Matches reports whether the rule's tool pattern matches tool: equal to
// it, or, for a pattern ending in "*", tool starts with the text before
// the "*". A pattern never matches the empty tool name.
func (r ApprovalRule) Matches(tool string) bool {
	if tool == "" {
		return false
	}
	if prefix, ok := strings.CutSuffix(r.Tool, "*"); ok {
		return strings.HasPrefix(tool, prefix)
	}
	return r.Tool == tool
}

// Needs reports whether a call of tool with the arguments args (the call's
// raw JSON arguments object) must be approved before it runs, and the
// index in a.Require of the first rule that matched (-1 when none). A nil
// Approval never needs approval.
//
// A rule matches when its tool pattern matches (Matches) and every key of
// its When matches (AND); rules are OR-ed. A When key matches when a
// top-level argument of that name equals one of the listed values: strings
// compare as strings (after JSON unescaping), numbers numerically (1 ==
// 1.0 == 1e0, exactly, at any size), booleans as booleans. An argument of
// another JSON type (null, array, object), or a key the call does not
// carry, never matches. Arguments that are not one JSON object match only
// rules without When.
//
// Argument names are compared as Go's encoding/json matches them to the
// fields of a struct, case-insensitively, and an argument given more than
// once matches when any of its occurrences does: a call cannot avoid a
// rule by spelling "method" as "Method", or by sending it twice, when the
// tool would read it anyway.
func (a *Approval) Needs(tool string, args json.RawMessage) (needed bool, rule int) {
	if a == nil {
		return false, -1
	}
	var (
		members []member
		decoded bool
		object  bool
	)
	for i, r := range a.Require {
		if !r.Matches(tool) {
			continue
		}
		if len(r.When) == 0 {
			return true, i
		}
		if !decoded {
			members, object = objectMembers(args)
			decoded = true
		}
		if object && r.whenMatches(members) {
			return true, i
		}
	}
	return false, -1
}

// whenMatches reports whether every key of r.When matches one of the members.
func (r ApprovalRule) whenMatches(members []member) bool {
	for name, values := range r.When {
		found := false
		for _, m := range members {
			if strings.EqualFold(m.name, name) && valueIn(m.value, values) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Condition returns the rule's When for people, "" when it has none:
// "method is POST, PUT, PATCH or DELETE", several arguments joined by
// " and " in name order ("method is POST and path is /admin").
func (r ApprovalRule) Condition() string {
	if len(r.When) == 0 {
		return ""
	}
	parts := make([]string, 0, len(r.When))
	for _, name := range slices.Sorted(maps.Keys(r.When)) {
		vals := make([]string, len(r.When[name]))
		for i, v := range r.When[name] {
			vals[i] = formatWhenValue(v)
		}
		parts = append(parts, name+" is "+orList(vals))
	}
	return strings.Join(parts, " and ")
}

// String describes the section for people: the rules joined by "; ", each
// its tool pattern and, for a conditional rule, " when " and its
// Condition, then the timeout, approvers and self-approval in brackets:
// "http_request when method is POST, PUT, PATCH or DELETE; run_process;
// mcp__github__* (timeout 1h, approvers oncall, self-approval off)". A
// section without rules is "no call needs approval (...)"; a nil Approval
// is "no approval section".
func (a *Approval) String() string {
	if a == nil {
		return "no approval section"
	}
	rules := make([]string, len(a.Require))
	for i, r := range a.Require {
		rules[i] = r.Tool
		if c := r.Condition(); c != "" {
			rules[i] += " when " + c
		}
	}
	head := strings.Join(rules, "; ")
	if head == "" {
		head = "no call needs approval"
	}
	self := "off"
	if a.Self {
		self = "on"
	}
	return fmt.Sprintf("%s (timeout %s, %s, self-approval %s)", head, FormatTimeout(a.TimeoutOrDefault()), FormatApprovers(a.Approvers), self)
}

// FormatApprovers returns "approvers a, b" for a list of names, or "any
// approver" for none.
func FormatApprovers(names []string) string {
	if len(names) == 0 {
		return "any approver"
	}
	return "approvers " + strings.Join(names, ", ")
}

// FormatTimeout returns d as a Go duration without zero trailing units:
// 1h0m0s is "1h", 1h30m0s "1h30m", 90s "1m30s", 2s "2s" (a zero unit
// between two others stays: "1h0m30s"). It reads back with
// time.ParseDuration.
func FormatTimeout(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// orList joins "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

// formatWhenValue prints a When value: a string as it is unless it could
// be read as something else (empty, surrounding space, a comma, a quote,
// or the text of a number or boolean), then quoted.
func formatWhenValue(v any) string {
	s, ok := v.(string)
	if !ok {
		return fmt.Sprint(v)
	}
	_, isNumber := normNumber(s)
	if s == "" || s != strings.TrimSpace(s) || strings.ContainsAny(s, `,"`) || s == "true" || s == "false" ||
		isNumber || strings.HasSuffix(s, " or") || strings.Contains(s, " or ") || strings.Contains(s, " and ") {
		return strconv.Quote(s)
	}
	return s
}

// Messages of the approval section's problems, after "approval.<key>: ".
const (
	msgApprovalTool      = "is required"
	msgApprovalToolStar  = "may hold * only at its end (a prefix followed by *, such as mcp__github__*)"
	msgApprovalWhen      = "must be a list of strings, numbers or booleans"
	msgApprovalWhenEmpty = "must list at least one value (an empty list matches no call)"
	msgApprovalTimeout   = "must be a duration from 1s to 168h"
	msgApprovalApprovers = "must be a list of names"
	msgApprovalSelf      = "must be true or false"
)

// approvalKeys and approvalRuleKeys are the keys of the approval section
// and of one of its rules, in document order.
var (
	approvalKeys     = []string{"require", "timeout", "approvers", "self"}
	approvalRuleKeys = []string{"tool", "when"}
)

// approval reads the optional approval section: {require?: [{tool, when?}],
// timeout?, approvers?, self?}; nil when the document has none (absent or
// null). Unknown keys are named "approval.<key>: unknown key", as
// docs/approvals.md fixes for this section, before the problems of the
// known keys in the order above.
func (d *docParser) approval(doc map[string]any) *Approval {
	v, ok := field(doc, "approval")
	if !ok {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		d.addf("approval", "must be a mapping")
		return nil
	}
	d.unknownKeys(obj, "approval", approvalKeys)
	a := &Approval{Timeout: DefaultApprovalTimeout}
	if v, ok := field(obj, "require"); ok {
		a.Require = d.approvalRules(v)
	}
	if v, ok := field(obj, "timeout"); ok {
		s, _ := v.(string)
		t, err := time.ParseDuration(s)
		if err != nil || t < MinApprovalTimeout || t > MaxApprovalTimeout {
			d.addf("approval.timeout", msgApprovalTimeout)
		} else {
			a.Timeout = t
		}
	}
	if v, ok := field(obj, "approvers"); ok {
		a.Approvers = d.approvers(v)
	}
	if v, ok := field(obj, "self"); ok {
		b, ok := v.(bool)
		if !ok {
			d.addf("approval.self", msgApprovalSelf)
		}
		a.Self = b
	}
	return a
}

// unknownKeys reports the keys of obj that are not in known, sorted, as
// "<prefix>.<key>: unknown key".
func (d *docParser) unknownKeys(obj map[string]any, prefix string, known []string) {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) {
			d.addf(join(prefix, k), msgUnknownKey)
		}
	}
}

// approvalRules reads approval.require: a list of {tool, when?}. An empty
// list is allowed (no call needs approval).
func (d *docParser) approvalRules(v any) []ApprovalRule {
	items, ok := v.([]any)
	if !ok {
		d.addf("approval.require", "must be a list")
		return nil
	}
	rules := make([]ApprovalRule, 0, len(items))
	for i, item := range items {
		key := index("approval.require", i)
		obj, ok := item.(map[string]any)
		if !ok {
			d.addf(key, "must be a mapping")
			continue
		}
		d.unknownKeys(obj, key, approvalRuleKeys)
		var r ApprovalRule
		if tv, ok := field(obj, "tool"); !ok {
			d.addf(join(key, "tool"), msgApprovalTool)
		} else if s, ok := d.str(tv, join(key, "tool")); ok {
			switch {
			case s == "":
				d.addf(join(key, "tool"), msgApprovalTool)
			case strings.Contains(strings.TrimSuffix(s, "*"), "*"):
				d.addf(join(key, "tool"), "%q %s", s, msgApprovalToolStar)
			}
			r.Tool = s
		}
		if wv, ok := field(obj, "when"); ok {
			r.When = d.approvalWhen(wv, join(key, "when"))
		}
		rules = append(rules, r)
	}
	return rules
}

// approvalWhen reads a rule's when: a mapping of argument names to
// non-empty lists of strings, numbers and booleans. An empty mapping is
// no condition (nil: the rule matches every call of its tool).
func (d *docParser) approvalWhen(v any, key string) map[string][]any {
	obj, ok := v.(map[string]any)
	if !ok {
		d.addf(key, "must be a mapping of argument names to lists of values")
		return nil
	}
	if len(obj) == 0 {
		return nil
	}
	when := make(map[string][]any, len(obj))
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		argKey := join(key, name)
		if name == "" {
			d.addf(key, "argument names must not be empty")
			continue
		}
		list, ok := obj[name].([]any)
		if !ok {
			d.addf(argKey, msgApprovalWhen)
			continue
		}
		if len(list) == 0 {
			d.addf(argKey, msgApprovalWhenEmpty)
			continue
		}
		valid := true
		for _, item := range list {
			if kind, _ := whenValue(item); kind == kindNone {
				valid = false
			}
		}
		if !valid {
			d.addf(argKey, msgApprovalWhen)
			continue
		}
		when[name] = list
	}
	return when
}

// approvers reads approval.approvers: a list of non-blank names. An empty
// list is any approver, as an absent one.
func (d *docParser) approvers(v any) []string {
	items, ok := v.([]any)
	if !ok {
		d.addf("approval.approvers", msgApprovalApprovers)
		return nil
	}
	names := make([]string, 0, len(items))
	for _, item := range items {
		s, ok := item.(string)
		if !ok || strings.TrimSpace(s) == "" {
			d.addf("approval.approvers", msgApprovalApprovers)
			return nil
		}
		names = append(names, s)
	}
	if len(names) == 0 {
		return nil
	}
	return names
}
