// The provider envelopes against the recorded payloads shared with the Go
// package client/envelope (client/envelope/testdata).

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  anthropicTools, callID, fromAnthropic, fromMCP, fromOpenAIChat, fromOpenAIResponses, mcpTools,
  openAIChatTools, openAIResponsesTools, parseArguments, providerID, toAnthropic, toMCP, toOpenAIChat,
  toOpenAIResponses, EnvelopeError, type CallTemplate, type ToolCall,
} from "../src/envelope/index.js";
import type { CatalogEntry, Result } from "../src/index.js";
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
