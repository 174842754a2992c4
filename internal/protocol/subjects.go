package protocol

import (
	"fmt"
	"strings"
)

// Names derives every subject, stream and bucket name from one prefix, so two
// prefixes can share a NATS account. The zero value is not usable; call NewNames.
type Names struct {
	prefix string
}

// NewNames returns the names for prefix ("" means DefaultPrefix). The prefix must
// be a valid token.
func NewNames(prefix string) (Names, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := CheckToken("subject prefix", prefix); err != nil {
		return Names{}, err
	}
	return Names{prefix: prefix}, nil
}

// Prefix returns the subject prefix.
func (n Names) Prefix() string { return n.prefix }

func (n Names) stream(suffix string) string { return strings.ToUpper(n.prefix) + "_" + suffix }
func (n Names) bucket(suffix string) string { return n.prefix + "_" + suffix }

// CallsStream is the work-queue stream of calls: <PREFIX>_CALLS.
func (n Names) CallsStream() string { return n.stream("CALLS") }

// ResultsStream is the stream of results: <PREFIX>_RESULTS.
func (n Names) ResultsStream() string { return n.stream("RESULTS") }

// ProgressStream is the stream of progress events: <PREFIX>_PROGRESS.
func (n Names) ProgressStream() string { return n.stream("PROGRESS") }

// DLQStream is the dead-letter stream: <PREFIX>_DLQ.
func (n Names) DLQStream() string { return n.stream("DLQ") }

// AuditStream is the audit stream: <PREFIX>_AUDIT.
func (n Names) AuditStream() string { return n.stream("AUDIT") }

// PersonalitiesBucket is the public bucket of personality documents.
func (n Names) PersonalitiesBucket() string { return n.bucket("personalities") }

// ToolsBucket is the public tool catalog bucket.
func (n Names) ToolsBucket() string { return n.bucket("tools") }

// CancelsBucket records cancel requests (internal).
func (n Names) CancelsBucket() string { return n.bucket("cancels") }

// CompletionsBucket records answered calls (internal).
func (n Names) CompletionsBucket() string { return n.bucket("completions") }

// LeasesBucket holds one lease per running call (internal).
func (n Names) LeasesBucket() string { return n.bucket("leases") }

// WorkersBucket holds live workers (internal).
func (n Names) WorkersBucket() string { return n.bucket("workers") }

// RateLimitsBucket holds fleet-wide rate-limit counters (internal).
func (n Names) RateLimitsBucket() string { return n.bucket("ratelimits") }

// FailuresBucket keeps the last infrastructure failure of a call (internal).
func (n Names) FailuresBucket() string { return n.bucket("failures") }

// BlobsBucket is the Object Store bucket of large outputs stored by
// reference (protocol.md, "Large outputs by reference"): <p>_blobs, its
// stream OBJ_<p>_blobs.
func (n Names) BlobsBucket() string { return n.bucket("blobs") }

// CallsFilter is the filter subject of the calls stream: <p>.call.>.
func (n Names) CallsFilter() string { return n.prefix + ".call.>" }

// PoolFilter is the filter subject of a pool's durable consumer: <p>.call.<pool>.>.
func (n Names) PoolFilter(pool string) (string, error) {
	if err := CheckToken("pool", pool); err != nil {
		return "", err
	}
	return n.prefix + ".call." + pool + ".>", nil
}

// PersonalityFilter is the filter subject of the durable consumer of one
// personality's calls in a pool (scheduling.md):
// <p>.call.<pool>.<personality>.>. The filters of two personalities never
// overlap, which a work-queue stream requires of its consumers.
func (n Names) PersonalityFilter(pool, personality string) (string, error) {
	if err := CheckToken("pool", pool); err != nil {
		return "", err
	}
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	return n.prefix + ".call." + pool + "." + personality + ".>", nil
}

// PoolWaitingFilter matches every call subject of a pool, one token for the
// personality and one for the tool: <p>.call.<pool>.*.*, the subjects
// filter of the calls stream's information that tells which personalities
// have calls waiting.
func (n Names) PoolWaitingFilter(pool string) (string, error) {
	if err := CheckToken("pool", pool); err != nil {
		return "", err
	}
	return n.prefix + ".call." + pool + ".*.*", nil
}

// ConsumerSep separates the pool from the personality in the name of a
// personality's consumer; no token holds it.
const ConsumerSep = "~"

// PersonalityConsumer is the durable name of the consumer of one
// personality's calls in a pool: <pool>~<personality> (a "~" is in no
// token, so the name is unique and the pool reads back from it).
func PersonalityConsumer(pool, personality string) string {
	return pool + ConsumerSep + personality
}

// ParsePersonalityConsumer returns the pool and personality of a consumer
// name made by PersonalityConsumer; ok is false for any other name.
func ParsePersonalityConsumer(name string) (pool, personality string, ok bool) {
	pool, personality, ok = strings.Cut(name, ConsumerSep)
	if !ok || !ValidToken(pool) || !ValidToken(personality) {
		return "", "", false
	}
	return pool, personality, true
}

// CallTokens are the tokens of a call subject.
type CallTokens struct {
	Pool, Personality, Tool string
}

// CallSubject returns <p>.call.<pool>.<personality>.<tool>.
func (n Names) CallSubject(pool, personality, tool string) (string, error) {
	if err := CheckToken("pool", pool); err != nil {
		return "", err
	}
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("tool", tool); err != nil {
		return "", err
	}
	return n.prefix + ".call." + pool + "." + personality + "." + tool, nil
}

// ParseCallSubject splits <p>.call.<pool>.<personality>.<tool> into its
// tokens. A subject of another shape, or with a token that is not valid, is
// an error naming the subject (and, for <p>.call.<pool>.<tool>, saying that
// it looks like a call of protocol version 1).
func (n Names) ParseCallSubject(subject string) (CallTokens, error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".call.")
	if !ok {
		return CallTokens{}, fmt.Errorf("subject %q is not a call subject", subject)
	}
	parts := strings.Split(rest, ".")
	if len(parts) == 3 && ValidToken(parts[0]) && ValidToken(parts[1]) && ValidToken(parts[2]) {
		return CallTokens{Pool: parts[0], Personality: parts[1], Tool: parts[2]}, nil
	}
	if len(parts) == 2 && ValidToken(parts[0]) && ValidToken(parts[1]) {
		return CallTokens{}, fmt.Errorf("subject %q is not <prefix>.call.<pool>.<personality>.<tool> "+
			"(a call of protocol version 1? version 2 puts the personality into the subject)", subject)
	}
	return CallTokens{}, fmt.Errorf("subject %q is not <prefix>.call.<pool>.<personality>.<tool>", subject)
}

// ResultsFilter is the filter subject of the results stream.
func (n Names) ResultsFilter() string { return n.prefix + ".result.>" }

// ResultSubject returns <p>.result.<personality>.<batch>.<call>.
func (n Names) ResultSubject(personality, batch, call string) (string, error) {
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("batch_id", batch); err != nil {
		return "", err
	}
	if err := CheckToken("call_id", call); err != nil {
		return "", err
	}
	return n.prefix + ".result." + personality + "." + batch + "." + call, nil
}

// BatchResultsFilter returns <p>.result.<personality>.<batch>.>, the results
// of one batch of a personality; batch "" means every batch of the
// personality: <p>.result.<personality>.>.
func (n Names) BatchResultsFilter(personality, batch string) (string, error) {
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if batch == "" {
		return n.prefix + ".result." + personality + ".>", nil
	}
	if err := CheckToken("batch_id", batch); err != nil {
		return "", err
	}
	return n.prefix + ".result." + personality + "." + batch + ".>", nil
}

// CallResultFilter returns <p>.result.<personality>.*.<call>, matching a
// call's result in any batch of its personality.
func (n Names) CallResultFilter(personality, call string) (string, error) {
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("call_id", call); err != nil {
		return "", err
	}
	return n.prefix + ".result." + personality + ".*." + call, nil
}

// ProgressFilter is the filter subject of the progress stream.
func (n Names) ProgressFilter() string { return n.prefix + ".progress.>" }

// ProgressSubject returns <p>.progress.<audience>.<personality>.<batch>.<call>.
func (n Names) ProgressSubject(a Audience, personality, batch, call string) (string, error) {
	if !a.Valid() {
		return "", fmt.Errorf("audience %q must be internal, user or dashboard", a)
	}
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("batch_id", batch); err != nil {
		return "", err
	}
	if err := CheckToken("call_id", call); err != nil {
		return "", err
	}
	return n.prefix + ".progress." + string(a) + "." + personality + "." + batch + "." + call, nil
}

// ProgressTail returns the filter for the progress events of one
// personality, one audience ("" = every audience) and one batch ("" = every
// batch): <p>.progress.<audience|*>.<personality>.<batch|*>.*.
func (n Names) ProgressTail(a Audience, personality, batch string) (string, error) {
	aud := "*"
	if a != "" {
		if !a.Valid() {
			return "", fmt.Errorf("audience %q must be internal, user or dashboard", a)
		}
		aud = string(a)
	}
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	b := "*"
	if batch != "" {
		if err := CheckToken("batch_id", batch); err != nil {
			return "", err
		}
		b = batch
	}
	return n.prefix + ".progress." + aud + "." + personality + "." + b + ".*", nil
}

// CancelSubject returns <p>.cancel.<personality>.<call>.
func (n Names) CancelSubject(personality, call string) (string, error) {
	if err := CheckToken("personality", personality); err != nil {
		return "", err
	}
	if err := CheckToken("call_id", call); err != nil {
		return "", err
	}
	return n.prefix + ".cancel." + personality + "." + call, nil
}

// CancelFilter is <p>.cancel.*.* (core NATS, every worker subscribes).
func (n Names) CancelFilter() string { return n.prefix + ".cancel.*.*" }

// ParseCancelSubject returns the personality and call id of
// <p>.cancel.<personality>.<call>.
func (n Names) ParseCancelSubject(subject string) (personality, call string, err error) {
	rest, ok := strings.CutPrefix(subject, n.prefix+".cancel.")
	if ok {
		personality, call, ok = strings.Cut(rest, ".")
	}
	if !ok || !ValidToken(personality) || !ValidToken(call) {
		return "", "", fmt.Errorf("subject %q is not <prefix>.cancel.<personality>.<call>", subject)
	}
	return personality, call, nil
}

// DLQFilter is the filter subject of the dead-letter stream.
func (n Names) DLQFilter() string { return n.prefix + ".dlq.>" }

// DLQSubject returns <p>.dlq.<tool>.
func (n Names) DLQSubject(tool string) (string, error) {
	if err := CheckToken("tool", tool); err != nil {
		return "", err
	}
	return n.prefix + ".dlq." + tool, nil
}

// AuditFilter is the filter subject of the audit stream.
func (n Names) AuditFilter() string { return n.prefix + ".audit.>" }

// AuditSubject returns <p>.audit.<tool>.
func (n Names) AuditSubject(tool string) (string, error) {
	if err := CheckToken("tool", tool); err != nil {
		return "", err
	}
	return n.prefix + ".audit." + tool, nil
}

// ResultMsgID returns the Nats-Msg-Id of a call's result: <call>.result.
func ResultMsgID(call string) string { return call + ResultMsgIDSuffix }

// RedriveResultMsgID returns the Nats-Msg-Id of the result of a redriven call
// (HeaderRedrive = seq): <call>.result.redrive-<seq>, so that it is not taken
// for a duplicate of the abandonment result within the dedupe window.
func RedriveResultMsgID(call, seq string) string {
	return call + ResultMsgIDSuffix + ".redrive-" + seq
}

// RedriveCallMsgID returns the Nats-Msg-Id of a call re-published from the
// DLQ: <call>.redrive-<seq>.
func RedriveCallMsgID(call, seq string) string { return call + ".redrive-" + seq }
