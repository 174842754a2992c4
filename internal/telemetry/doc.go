// Package telemetry holds what Capstan's libraries share about tracing and
// metrics, with the OpenTelemetry API only: the attribute and metric names
// its spans and metrics use, the NATS header carrier of the W3C trace
// context, an HTTP transport that keeps URLs off spans, and a log handler
// that adds trace ids. The SDK set-up of the binaries (exporters, the
// Prometheus registry) is package otelsetup's, so that importing the client
// links no SDK.
package telemetry
