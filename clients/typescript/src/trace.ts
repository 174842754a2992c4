// W3C trace context for published calls, through @opentelemetry/api when the
// program has it (an optional peer dependency): each publication is a
// producer span ("send <subject>") whose context travels in the call's
// traceparent and tracestate headers. Without the package, or without an
// active span context, no trace header is set.

type OTel = typeof import("@opentelemetry/api");

let otel: OTel | null | undefined;

/** Loads @opentelemetry/api once; null when it is not installed. */
export async function loadOTel(): Promise<OTel | null> {
  if (otel !== undefined) return otel;
  try {
    otel = await import("@opentelemetry/api");
  } catch {
    otel = null;
  }
  return otel;
}

/** Attributes of a producer span, as the Go client sets them (never the arguments). */
export interface SendAttributes {
  subject: string;
  callID: string;
  toolCallID: string;
  tool: string;
  batchID: string;
  bodySize: number;
}

/** A started producer span: its trace headers, and end(error?) to finish it. */
export interface SendSpan {
  headers: Record<string, string>;
  end(error?: unknown, duplicate?: boolean): void;
}

const none: SendSpan = { headers: {}, end() {} };

/**
 * Starts the producer span of one publication under the active context and
 * returns the W3C headers of its context: `traceparent` (and `tracestate`
 * when set). With no OpenTelemetry SDK registered the span is the no-op
 * tracer's, which carries the active span context unchanged, so the headers
 * still propagate the caller's trace.
 */
export function startSend(a: SendAttributes): SendSpan {
  const api = otel;
  if (!api) return none;
  const tracer = api.trace.getTracer("github.com/capstanhq/capstan/clients/typescript");
  const span = tracer.startSpan("send " + a.subject, {
    kind: api.SpanKind.PRODUCER,
    attributes: {
      "messaging.system": "nats",
      "messaging.operation.type": "send",
      "messaging.operation.name": "send",
      "messaging.destination.name": a.subject,
      "messaging.message.id": a.callID,
      "messaging.message.body.size": a.bodySize,
      "gen_ai.tool.name": a.tool,
      "gen_ai.tool.call.id": a.toolCallID,
      "capstan.batch.id": a.batchID,
    },
  }, api.context.active());
  const sc = span.spanContext();
  const headers: Record<string, string> = {};
  if (api.isSpanContextValid(sc)) {
    const flags = (sc.traceFlags & 0xff).toString(16).padStart(2, "0");
    headers.traceparent = `00-${sc.traceId}-${sc.spanId}-${flags}`;
    const ts = sc.traceState?.serialize();
    if (ts) headers.tracestate = ts;
  }
  return {
    headers,
    end(error?: unknown, duplicate?: boolean) {
      if (error) {
        span.setStatus({ code: api.SpanStatusCode.ERROR, message: "publish failed" });
        span.setAttribute("error.type", "_OTHER");
      }
      if (duplicate) span.setAttribute("capstan.duplicate", true);
      span.end();
    },
  };
}
