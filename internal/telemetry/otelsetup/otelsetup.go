// Package otelsetup owns the OpenTelemetry SDK set-up of Capstan's binaries:
// a TracerProvider and a MeterProvider configured from the standard OTEL_*
// variables, and a Prometheus registry for /metrics. It is the only importer
// of the OTel SDK, its exporters (gRPC included) and Prometheus outside
// tests.
//
// Libraries (worker, client) never call Setup: they take a TracerProvider and
// a MeterProvider (the global ones by default), so a program or a test can
// give them anything, an in-memory exporter included. The attribute and
// metric names, the NATS header carrier and the log handler are package
// telemetry's, which uses the OTel API only.
package otelsetup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/telemetry"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

var osGetenv = os.Getenv

// Config configures Setup.
type Config struct {
	// ServiceName is service.name unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES set it. Required.
	ServiceName string
	// ServiceInstanceID is service.instance.id (the worker id); optional.
	ServiceInstanceID string
	// Getenv reads the variables that decide what is exported; default
	// os.Getenv. The exporters themselves read the rest of OTEL_* (endpoint,
	// headers, TLS, timeouts) from the process environment.
	Getenv func(string) string
	// Prometheus builds a registry served by MetricsHandler.
	Prometheus bool
	// Logger receives exporter errors (rate limited); default slog.Default().
	Logger *slog.Logger
	// SpanQueueSize bounds the spans waiting for the exporter beyond the
	// batch processor's own queue; past it spans are dropped and counted.
	// Default 2048.
	SpanQueueSize int
}

// Telemetry is the set-up made by Setup. Its providers are valid (no-op ones
// when nothing is exported) until Shutdown.
type Telemetry struct {
	// TracerProvider makes spans; a no-op one when traces are not exported.
	TracerProvider trace.TracerProvider
	// MeterProvider makes metrics; always an SDK provider, read by the
	// Prometheus handler and by the OTLP exporter when configured.
	MeterProvider metric.MeterProvider
	// TracesExported and MetricsExported report whether an OTLP exporter
	// was configured for each signal.
	TracesExported, MetricsExported bool

	metrics  http.Handler
	queue    *DropQueue
	shutdown []func(context.Context) error
}

// Setup reads the OTEL_* variables through cfg.Getenv and builds the
// providers:
//
//   - traces are exported over OTLP when OTEL_TRACES_EXPORTER is "otlp", or
//     when it is unset and OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; otherwise the TracerProvider
//     is a no-op one (no exporter, no errors);
//   - metrics are pushed over OTLP on the same rule with OTEL_METRICS_EXPORTER
//     and OTEL_EXPORTER_OTLP_METRICS_ENDPOINT, and are always available on
//     MetricsHandler when cfg.Prometheus is set;
//   - OTEL_SDK_DISABLED=true exports nothing;
//   - the protocol is OTEL_EXPORTER_OTLP_PROTOCOL (or the per-signal
//     variable): "http/protobuf" (default) or "grpc".
//
// A value it does not understand is an error naming the variable. Spans go
// through a DropQueue: a slow or unreachable collector never slows a call,
// and the spans it cannot take are counted in capstan.spans.dropped.
func Setup(ctx context.Context, cfg Config) (*Telemetry, error) {
	if cfg.ServiceName == "" {
		return nil, errors.New("telemetry: Config.ServiceName must be set")
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	log := cmp.Or(cfg.Logger, slog.Default())
	plan, err := readPlan(getenv)
	if err != nil {
		return nil, err
	}
	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	t := &Telemetry{TracerProvider: noop.NewTracerProvider()}
	ok := false
	defer func() {
		if !ok {
			_ = t.Shutdown(context.Background())
		}
	}()

	var readers []sdkmetric.Option
	if cfg.Prometheus {
		reg := prometheus.NewRegistry()
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	if plan.metrics {
		exp, err := metricExporter(ctx, plan.metricsProtocol)
		if err != nil {
			return nil, err
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
		t.MetricsExported = true
	}
	mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)

	if plan.traces {
		exp, err := spanExporter(ctx, plan.tracesProtocol)
		if err != nil {
			return nil, err
		}
		// The batch processor blocks when its queue is full; the DropQueue in
		// front of it never does, and counts what it drops.
		bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking())
		dropped, err := mp.Meter(telemetry.ScopeName).Int64Counter(telemetry.MetricSpansDropped,
			metric.WithDescription("Spans dropped because the exporter could not keep up"), metric.WithUnit("{span}"))
		if err != nil {
			return nil, fmt.Errorf("telemetry: %w", err)
		}
		t.queue = NewDropQueue(bsp, cfg.SpanQueueSize, func() { dropped.Add(context.Background(), 1) })
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.queue), sdktrace.WithResource(res))
		t.TracerProvider = tp
		t.TracesExported = true
		// Shut the tracer provider down first: it flushes into the meter.
		t.shutdown = append([]func(context.Context) error{tp.Shutdown}, t.shutdown...)
	}
	if plan.traces || plan.metrics {
		otel.SetErrorHandler(newErrorLog(log))
	}
	ok = true
	return t, nil
}

// MetricsHandler serves the metrics in the Prometheus text format; nil unless
// Config.Prometheus was set.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// DroppedSpans returns how many spans were dropped since Setup.
func (t *Telemetry) DroppedSpans() uint64 {
	if t.queue == nil {
		return 0
	}
	return t.queue.Dropped()
}

// Shutdown flushes and stops the exporters within ctx. It is safe to call
// more than once.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		if err := f(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// plan is what Setup exports, read from the environment.
type plan struct {
	traces, metrics                 bool
	tracesProtocol, metricsProtocol string
}

func readPlan(getenv func(string) string) (plan, error) {
	var p plan
	var errs []error
	switch v := strings.ToLower(strings.TrimSpace(getenv("OTEL_SDK_DISABLED"))); v {
	case "", "false":
	case "true":
		return p, nil
	default:
		return p, fmt.Errorf("telemetry: OTEL_SDK_DISABLED %q must be true or false", v)
	}
	generic := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	signal := func(exporterVar, endpointVar string, allowed ...string) bool {
		v := strings.ToLower(strings.TrimSpace(getenv(exporterVar)))
		switch {
		case v == "":
			return generic || getenv(endpointVar) != ""
		case v == "otlp":
			return true
		case v == "none":
			return false
		}
		for _, a := range allowed {
			if v == a {
				return false
			}
		}
		errs = append(errs, fmt.Errorf("telemetry: %s %q must be otlp or none%s", exporterVar, v, orList(allowed)))
		return false
	}
	p.traces = signal("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	// "prometheus" pushes nothing: /metrics on CAPSTAN_HTTP_ADDR is always there.
	p.metrics = signal("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "prometheus")
	protocol := func(signalVar string) string {
		name, v := signalVar, getenv(signalVar)
		if v == "" {
			name, v = "OTEL_EXPORTER_OTLP_PROTOCOL", getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch v = strings.TrimSpace(v); v {
		case "", "http/protobuf":
			return "http/protobuf"
		case "grpc":
			return "grpc"
		}
		errs = append(errs, fmt.Errorf("telemetry: %s %q must be http/protobuf or grpc", name, v))
		return ""
	}
	p.tracesProtocol = protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	p.metricsProtocol = protocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
	return p, errors.Join(errs...)
}

func orList(extra []string) string {
	if len(extra) == 0 {
		return ""
	}
	return " (or " + strings.Join(extra, ", ") + ")"
}

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []resource.Option{
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)),
	}
	if cfg.ServiceInstanceID != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(cfg.ServiceInstanceID)))
	}
	// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win over the defaults.
	attrs = append(attrs, resource.WithFromEnv())
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	return res, nil
}

func spanExporter(ctx context.Context, protocol string) (sdktrace.SpanExporter, error) {
	var exp sdktrace.SpanExporter
	var err error
	if protocol == "grpc" {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
	}
	return exp, nil
}

func metricExporter(ctx context.Context, protocol string) (sdkmetric.Exporter, error) {
	var exp sdkmetric.Exporter
	var err error
	if protocol == "grpc" {
		exp, err = otlpmetricgrpc.New(ctx)
	} else {
		exp, err = otlpmetrichttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP metric exporter: %w", err)
	}
	return exp, nil
}

// errorLog logs OTel SDK errors (an unreachable collector, mostly) at warn,
// at most once per interval, with the count of the ones it held back.
type errorLog struct {
	log      *slog.Logger
	interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newErrorLog(log *slog.Logger) *errorLog { return &errorLog{log: log, interval: 30 * time.Second} }

// Handle implements otel.ErrorHandler.
func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < e.interval {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn("telemetry export failed", "error", err, "suppressed", n)
}
