// Package protocol holds the version-2 wire contract between dispatchers and
// workers: subject and stream names, header names and a strict call decoder;
// the message types are package wire's, under the same names here. It
// imports nothing of Capstan but wire, never logs and never performs I/O.
package protocol

import "github.com/capstanhq/capstan/wire"

// Version is the value of the Capstan-Protocol header on every message.
// Version 2 put the personality into the call, result, progress and cancel
// subjects (docs/protocol.md).
const Version = "2"

// MetadataProtocol is the JetStream metadata key (on streams and the pool
// consumers) that records the protocol version they were created or migrated
// for; its value is Version. Streams without it were created by version 1.
const MetadataProtocol = "capstan_protocol"

// Header names. traceparent and tracestate are lower-case exactly, because
// nats.Header lookups are case-sensitive.
const (
	HeaderMsgID           = "Nats-Msg-Id"
	HeaderProtocol        = "Capstan-Protocol"
	HeaderTraceparent     = "traceparent"
	HeaderTracestate      = "tracestate"
	HeaderBaggage         = "baggage"
	HeaderDeadReason      = "Capstan-Dead-Reason"
	HeaderDeliveries      = "Capstan-Deliveries"
	HeaderOriginalSubject = "Capstan-Original-Subject"
	HeaderDeadAt          = "Capstan-Dead-At"
	// HeaderDeadBodyTruncated is set on a dead letter whose body had to be
	// cut to fit the server's max payload beside the dead-letter headers;
	// its value is the original body's size in bytes.
	HeaderDeadBodyTruncated = "Capstan-Dead-Body-Truncated"
	// HeaderRedrive marks a call re-published from the DLQ by "dispatcher
	// dlq redrive"; its value is the dead letter's DLQ sequence. The result
	// of such a call gets its own Nats-Msg-Id (RedriveResultMsgID).
	HeaderRedrive          = "Capstan-Redrive"
	ResultMsgIDSuffix      = ".result"
	MaxCallBytes           = 1 << 20
	DefaultPrefix          = "capstan"
	DefaultPool            = "default"
	DefaultPlatform        = "api"
	DefaultTurnBudgetChars = 80000
)

// Code is the failure class of a result (wire.Code).
type Code = wire.Code

// The four result codes of protocol.md.
const (
	CodeInputInvalid    = wire.CodeInputInvalid
	CodeNotAvailable    = wire.CodeNotAvailable
	CodeExecutionFailed = wire.CodeExecutionFailed
	CodeStaleWrite      = wire.CodeStaleWrite
)

// Audience is who a progress event is for (wire.Audience).
type Audience = wire.Audience

// The three audiences. AudienceInternal is the default.
const (
	AudienceInternal  = wire.AudienceInternal
	AudienceUser      = wire.AudienceUser
	AudienceDashboard = wire.AudienceDashboard
)
