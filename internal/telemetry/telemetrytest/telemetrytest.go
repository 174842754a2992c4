// Package telemetrytest records spans and metrics in memory for tests, and
// renders a recorded trace as an ASCII tree (the one docs/operations.md
// shows).
package telemetrytest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Tracing returns a TracerProvider that records every span (always sampled)
// and the recorder to read them; the provider is shut down when t ends.
func Tracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// Metrics returns a MeterProvider read by a manual reader, and the reader.
func Metrics(t testing.TB) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, r
}

// Sum returns the value of the counter or gauge name summed over the data
// points whose attributes include every attribute of want.
func Sum(t testing.TB, r *sdkmetric.ManualReader, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	var total float64
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += float64(p.Value)
					}
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += float64(p.Value)
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						total += float64(p.Count)
					}
				}
			}
		}
	}
	return total
}

// Trace returns the spans of one trace, by trace id.
func Trace(spans []sdktrace.ReadOnlySpan, id trace.TraceID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.SpanContext().TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// Render draws spans as a tree, children in start order, one line per span:
// its name, kind, duration (unless durations is false) and attributes, then
// its links and events indented below it. A span whose parent is not among
// spans is a root.
func Render(spans []sdktrace.ReadOnlySpan, durations bool) string {
	byID := map[trace.SpanID]bool{}
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = true
	}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		p := s.Parent().SpanID()
		if s.Parent().IsValid() && byID[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	order := func(list []sdktrace.ReadOnlySpan) {
		slices.SortStableFunc(list, func(a, b sdktrace.ReadOnlySpan) int {
			return cmp.Or(a.StartTime().Compare(b.StartTime()), strings.Compare(a.Name(), b.Name()))
		})
	}
	order(roots)
	var b strings.Builder
	var draw func(s sdktrace.ReadOnlySpan, prefix string, last, root bool)
	draw = func(s sdktrace.ReadOnlySpan, prefix string, last, root bool) {
		branch, next := "├─ ", "│  "
		if last {
			branch, next = "└─ ", "   "
		}
		if root {
			branch, next = "", ""
		}
		line := fmt.Sprintf("%s%s%s [%s]", prefix, branch, s.Name(), s.SpanKind())
		if durations {
			line += " " + s.EndTime().Sub(s.StartTime()).Round(time.Microsecond).String()
		}
		if s.Status().Code.String() == "Error" {
			line += " status=Error"
		}
		b.WriteString(line + "\n")
		detail := prefix + next
		kids := children[s.SpanContext().SpanID()]
		bar := "   "
		if len(kids) > 0 {
			bar = "│  "
		}
		if attrs := attrText(s.Attributes()); attrs != "" {
			b.WriteString(detail + bar + "  " + attrs + "\n")
		}
		for _, l := range s.Links() {
			rel := "another trace"
			if l.SpanContext.TraceID() == s.SpanContext().TraceID() {
				rel = "this trace"
			}
			fmt.Fprintf(&b, "%s%s  link → span %s of %s\n", detail, bar, l.SpanContext.SpanID(), rel)
		}
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "%s%s  event %s %s\n", detail, bar, e.Name, attrText(e.Attributes))
		}
		order(kids)
		for i, k := range kids {
			draw(k, detail, i == len(kids)-1, false)
		}
	}
	for _, r := range roots {
		draw(r, "", true, true)
	}
	return b.String()
}

func attrText(kvs []attribute.KeyValue) string {
	parts := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}
