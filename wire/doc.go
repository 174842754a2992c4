// Package wire holds the JSON messages of Capstan's wire protocol
// (docs/protocol.md): the Call a dispatcher publishes, the one Result a
// worker answers it with, the Progress events a running tool emits, the
// failure Codes, the progress Audiences, the CatalogEntry of each hosted
// tool and the AuditRecord of each handled call (DecodeAuditRecords reads
// the batch of records an audit message holds). It is a leaf package: it
// imports only the standard library and internal/jsonenc (its JSON
// appenders, themselves standard library only), never logs and performs
// no I/O, so anything that reads or writes Capstan messages can use it
// without pulling in a NATS client.
//
// Packages tool and client use these types under their own names
// (tool.Code, tool.Audience, client.Call, client.Result, ...): they are the
// same types, so a client.Result's Code compares with tool.CodeInputInvalid.
package wire
