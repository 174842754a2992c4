// The provider envelopes against the recorded payloads shared with the Go
// package client/envelope (client/envelope/testdata).

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  anthropicTools, callID, fromAnthropic, fromMCP, fromOpenAIChat, fromOpenAIResponses, mcpTools,
  mcpResult, openAIChatTools, openAIResponsesTools, parseArguments, providerID, text, toAnthropic, toMCP, toOpenAIChat,
  toOpenAIResponses, EnvelopeError, type CallTemplate, type ToolCall,
} from "../src/envelope/index.js";
import type { BlobRef, CatalogEntry, Result } from "../src/index.js";
import { readJSON } from "./helpers.js";

const testdata = ["..", "..", "client", "envelope", "testdata"];

interface Fixture {
  provider: string;
  template: CallTemplate;
  cases: Array<{
    name: string; input: unknown; request_id?: unknown;
    calls: Array<{ provider_id: string; call_id?: string; tool?: string; args?: unknown; failure?: string }>;
    results: Array<Result | null>; output: unknown;
  }>;
  errors: Array<{ name: string; input: unknown; error: string }>;
}

function translate(provider: string, tmpl: CallTemplate, input: unknown):
  { calls: ToolCall[]; render(r: Result[]): unknown; requestID?: unknown } {
  switch (provider) {
    case "openai_chat": {
      const calls = fromOpenAIChat(input, tmpl);
      return { calls, render: (r) => toOpenAIChat(calls, r) };
    }
    case "openai_responses": {
      const calls = fromOpenAIResponses(input, tmpl);
      return { calls, render: (r) => toOpenAIResponses(calls, r) };
    }
    case "anthropic": {
      const calls = fromAnthropic(input, tmpl);
      return { calls, render: (r) => toAnthropic(calls, r) };
    }
    case "mcp": {
      const mc = fromMCP(input, tmpl);
      return { calls: [mc], render: (r) => toMCP(mc, r[0]!), requestID: mc.requestID };
    }
  }
  throw new Error("unknown provider " + provider);
}

for (const file of ["openai_chat.json", "openai_responses.json", "anthropic.json", "mcp.json"]) {
  const f = readJSON<Fixture>(...testdata, file);
  for (const c of f.cases) {
    test(`${f.provider}: ${c.name}`, () => {
      for (const input of [c.input, JSON.stringify(c.input)]) { // parsed and as JSON text
        const { calls, render, requestID } = translate(f.provider, f.template, input);
        assert.equal(calls.length, c.calls.length);
        const results: Result[] = calls.map((got, i) => {
          const want = c.calls[i]!;
          assert.equal(got.providerID, want.provider_id, `call ${i}: provider id`);
          assert.equal(got.call.session_id, f.template.session_id, `call ${i}: the template's fields`);
          if (want.failure) {
            assert.ok(got.failure, `call ${i} must fail`);
            assert.equal(got.failure.code, "input_invalid");
            assert.equal(got.failure.error, want.failure, `call ${i}`);
            assert.equal(got.failure.call_id, got.call.call_id);
          } else {
            assert.equal(got.failure, undefined, `call ${i}: ${got.failure?.error}`);
            assert.equal(got.call.call_id, want.call_id, `call ${i}`);
            assert.equal(got.call.tool, want.tool);
            assert.deepEqual(got.call.args, want.args);
          }
          return c.results[i] ?? got.failure!;
        });
        if (f.provider === "mcp") assert.deepEqual(requestID, c.request_id ?? null);
        assert.deepEqual(JSON.parse(JSON.stringify(render(results))), c.output);
      }
    });
  }
  for (const c of f.errors) {
    test(`${f.provider}: error: ${c.name}`, () => {
      assert.throws(() => translate(f.provider, f.template, JSON.stringify(c.input)), (e: unknown) => {
        assert.ok(e instanceof EnvelopeError);
        assert.equal(e.message, c.error);
        return true;
      });
    });
  }
}

test("catalog as provider tool definitions", () => {
  const f = readJSON<{ entries: CatalogEntry[]; [k: string]: unknown }>(...testdata, "catalog.json");
  assert.deepEqual(openAIChatTools(f.entries), f.openai_chat_tools);
  assert.deepEqual(openAIResponsesTools(f.entries), f.openai_responses_tools);
  assert.deepEqual(anthropicTools(f.entries), f.anthropic_tools);
  assert.deepEqual(mcpTools(f.entries), f.mcp_tools);
});

test("provider ids map to call ids one-to-one, as in Go", () => {
  const rows = readJSON<Array<{ provider_id: string; call_id: string; reversible: boolean }>>(...testdata, "ids.json");
  for (const r of rows) {
    const got = callID(r.provider_id);
    assert.equal(got, r.call_id, `callID(${JSON.stringify(r.provider_id)})`);
    const back = providerID(got);
    assert.equal(back !== undefined, r.reversible);
    if (back !== undefined) assert.equal(back, r.provider_id);
  }
  assert.notEqual(callID(""), callID(""), "an empty id gets a new id each time");
});

test("parseArguments: a JSON string holding an object", () => {
  assert.deepEqual(parseArguments('{"a":[1,{"b":null}]}'), { a: [1, { b: null }] });
  assert.deepEqual(parseArguments(""), {});
  assert.deepEqual(parseArguments(" \n"), {});
  for (const [s, msg] of [["{\"a\":", "is not valid JSON"], ["{\"a\":1} x", "is not valid JSON"], ["[1]", "must be a JSON object"],
    ["null", "must be a JSON object"], ["\"x\"", "must be a JSON object"]] as const) {
    assert.throws(() => parseArguments(s), { message: msg }, s);
  }
});

test("text names what the message does not carry, as Go's Text", () => {
  const blob = (part: string, size: number): BlobRef =>
    ({ bucket: "capstan_blobs", name: "p/c1", nuid: "p.X", size, sha256: "a".repeat(64), content_type: "text/plain; charset=utf-8", part });
  const ok = (extra: Partial<Result>): Result => ({ call_id: "c1", batch_id: "c1", tool: "t", ok: true, value: "x", duration_ms: 0, ...extra });
  const cases: Array<[string, Result, string]> = [
    ["ok", ok({}), "x"],
    ["a part this client does not know is the output", ok({ blob: blob("other", 1) }), "x\n[full output (1 byte) stored as blob capstan_blobs/p/c1]"],
    ["error with its blob", ok({ ok: false, code: "execution_failed", error: "boom", blob: blob("error", 90000) }),
      "execution_failed: boom\n[full error message (90000 bytes) stored as blob capstan_blobs/p/c1]"],
    ["structured left out, in its blob", ok({ structured_omitted: true, blob: blob("structured", 300000) }),
      "x\n[structured content (300000 bytes) left out; stored as blob capstan_blobs/p/c1]"],
    ["value blob and structured left out", ok({ structured_omitted: true, blob: blob("value", 65536) }),
      "x\n[full output (65536 bytes) stored as blob capstan_blobs/p/c1]\n[structured content left out: too large for the result message]"],
    ["empty value: the lines alone", ok({ value: "", structured_omitted: true }), "[structured content left out: too large for the result message]"],
  ];
  for (const [name, r, want] of cases) assert.equal(text(r), want, name);
  assert.equal(mcpResult(ok({ structured_omitted: true })).structuredContent, undefined);
});
