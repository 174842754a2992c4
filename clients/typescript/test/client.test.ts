// The client against a real pool (started by the Go harness, node_test.go):
// an embedded nats-server that requires its credentials and a real worker
// with the built-in tools.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { AsyncLocalStorage } from "node:async_hooks";
import { headers as natsHeaders } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { context, trace, ROOT_CONTEXT, type Context, type ContextManager } from "@opentelemetry/api";
import {
  AbortError, CancelledError, CapstanClient, ClientError, ExecutionFailedError, InputInvalidError,
  NotAvailableError, RESULT_MISSING, UnknownPersonalityError, type Call, type Progress,
} from "../src/index.js";
import {
  anthropicTools, execute, fromAnthropic, fromOpenAIChat, fromOpenAIResponses, openAIChatTools,
  toAnthropic, toOpenAIChat, toOpenAIResponses,
} from "../src/envelope/index.js";
import { connect, natsURL, noPool, unique } from "./helpers.js";

const echo = (text: string, extra: Record<string, unknown> = {}): Call =>
  ({ tool: "echo", session_id: "s", args: { text, ...extra } });

describe("a client against a real pool", { skip: noPool }, () => {
  let c: CapstanClient;
  before(async () => { c = await connect(); });
  after(async () => { await c.close(); });

  test("submit, then result", async () => {
    const call: Call = echo("hello");
    const { callID, duplicate } = await c.submit(call);
    assert.equal(duplicate, false);
    assert.equal(call.call_id, callID, "submit fills call_id");
    assert.equal(callID.length, 26);
    const r = await c.result(callID, { signal: AbortSignal.timeout(30_000) });
    assert.equal(r.ok, true);
    assert.equal(r.value, "hello");
    assert.equal(r.batch_id, callID, "the default batch is the call's id");
    assert.equal(r.worker_id, "ts-pool");
    assert.deepEqual(await c.lookup(callID), r, "the stored result");
    assert.equal(await c.lookup("never-submitted"), undefined);
    assert.equal((await c.submit({ ...call })).duplicate, true, "the same call_id again is a duplicate");
    assert.equal(await c.run(echo("via run")), "via run");
  });

  test("executeParallel: 500 calls, results in input order", async () => {
    const calls = Array.from({ length: 500 }, (_, i) => echo(`call ${i}`));
    const results = await c.executeParallel(calls, { batchID: unique("big"), waitMs: 120_000 });
    assert.equal(results.length, 500);
    const ids = new Set<string>();
    results.forEach((r, i) => {
      assert.equal(r.ok, true, `call ${i}: ${r.code} ${r.error}`);
      assert.equal(r.value, `call ${i}`);
      ids.add(r.call_id);
    });
    assert.equal(ids.size, 500);
    assert.equal(calls[0]!.call_id, undefined, "the caller's calls are not changed");
  });

  test("executeParallel: the budget is split and a missing result becomes RESULT_MISSING", async () => {
    const batchID = unique("slow");
    const results = await c.executeParallel([
      echo("fast"),
      echo("slow", { sleep_ms: 20_000 }),
      { tool: "no_such_tool", session_id: "s" },
    ], { batchID, waitMs: 1500, budgetChars: 3000 });
    assert.equal(results[0]!.ok, true);
    assert.equal(results[0]!.value, "fast");
    assert.deepEqual([results[1]!.ok, results[1]!.code, results[1]!.error], [false, "execution_failed", RESULT_MISSING]);
    assert.equal(results[1]!.batch_id, batchID);
    assert.deepEqual([results[2]!.code, results[2]!.error], ["not_available", "Unknown tool: no_such_tool"]);
    await c.cancel(results[1]!.call_id);
  });

  test("cancel a sleeping echo, with and without a reason", async () => {
    const batchID = unique("cancel");
    const started = c.progress({ batchID, fromStart: true, signal: AbortSignal.timeout(30_000) });
    const a: Call = { ...echo("a", { sleep_ms: 60_000, progress: [{ message: "sleeping" }] }), batch_id: batchID };
    const b: Call = { ...echo("b", { sleep_ms: 60_000, progress: [{ message: "sleeping" }] }), batch_id: batchID };
    await c.submit(a);
    await c.submit(b);
    let seen = 0;
    for await (const p of started) {
      assert.equal(p.message, "sleeping");
      if (++seen === 2) break;
    }
    await c.cancel(a.call_id!, "the user changed their mind");
    await c.cancel(b.call_id!);
    const ra = await c.result(a.call_id!, { batchID, signal: AbortSignal.timeout(30_000) });
    const rb = await c.result(b.call_id!, { batchID, signal: AbortSignal.timeout(30_000) });
    assert.deepEqual([ra.code, ra.error], ["execution_failed", "cancelled: the user changed their mind"]);
    assert.deepEqual([rb.code, rb.error], ["execution_failed", "cancelled: by request"]);
    const c2: Call = echo("c", { sleep_ms: 60_000 });
    const run = c.run(c2, { signal: AbortSignal.timeout(30_000) });
    await waitUntil(() => c2.call_id !== undefined);
    await new Promise((r) => setTimeout(r, 300));
    await c.cancel(c2.call_id!);
    await assert.rejects(run, (e: unknown) => e instanceof CancelledError && e.code === "execution_failed");
  });

  test("progress as an async iterator, filtered by audience", async () => {
    const batchID = unique("progress");
    const progress = [
      { message: "internal one", audience: "internal" },
      { message: "user one", percent: 10, audience: "user" },
      { message: "dashboard one", audience: "dashboard" },
      { message: "user two", percent: 90, audience: "user" },
      { message: "default audience" },
    ];
    const results = await c.executeParallel([echo("done", { progress })], { batchID, waitMs: 30_000 });
    assert.equal(results[0]!.ok, true);
    const read = async (audience?: "user" | "internal" | "dashboard") => {
      const got: Progress[] = [];
      const signal = AbortSignal.timeout(2000);
      for await (const p of c.progress({ audience, batchID, fromStart: true, signal })) got.push(p);
      return got;
    };
    const user = await read("user");
    assert.deepEqual(user.map((p) => [p.message, p.percent, p.audience]), [["user one", 10, "user"], ["user two", 90, "user"]]);
    assert.ok(user[0]!.seq < user[1]!.seq, "seq increases");
    assert.equal(user[0]!.call_id, results[0]!.call_id);
    assert.deepEqual((await read("internal")).map((p) => p.message), ["internal one", "default audience"]);
    assert.deepEqual((await read("dashboard")).map((p) => p.message), ["dashboard one"]);
    assert.equal((await read()).length, 5, "every audience");
  });

  test("AbortSignal ends every wait", async () => {
    await assert.rejects(c.result("never-submitted", { signal: AbortSignal.timeout(300) }), AbortError);
    const ac = new AbortController();
    ac.abort(new Error("stop"));
    await assert.rejects(c.result("never-submitted", { signal: ac.signal }), (e: unknown) =>
      e instanceof AbortError && (e.cause as Error).message === "stop");
    const started = Date.now();
    const got: Progress[] = [];
    for await (const p of c.progress({ batchID: unique("quiet"), signal: AbortSignal.timeout(300) })) got.push(p);
    assert.deepEqual(got, []);
    assert.ok(Date.now() - started < 10_000);
    const slow = c.executeParallel([echo("slow", { sleep_ms: 20_000 })], { waitMs: -1, signal: AbortSignal.timeout(500) });
    const [r] = await slow;
    assert.equal(r!.error, RESULT_MISSING, "executeParallel never fails as a whole");
    await c.cancel(r!.call_id);
  });

  test("typed errors for refused and failed calls", async () => {
    await assert.rejects(c.submit({ tool: "no_such_tool", session_id: "s" }), (e: unknown) =>
      e instanceof NotAvailableError && e.refused && e.code === "not_available" && e.message === "Unknown tool: no_such_tool");
    await assert.rejects(c.submit({ tool: "echo", session_id: "", args: {} }), (e: unknown) =>
      e instanceof InputInvalidError && e.refused && e.message === 'invalid call: field "session_id" must not be empty');
    await assert.rejects(c.run({ ...echo("slow", { sleep_ms: 5000 }), timeout_ms: 200 }, { signal: AbortSignal.timeout(20_000) }),
      (e: unknown) => e instanceof ExecutionFailedError && !e.refused && e.message === "timed out after 200ms");
    await assert.rejects(c.run({ tool: "echo", session_id: "s", args: { wrong: 1 } }), (e: unknown) =>
      e instanceof InputInvalidError && !e.refused);
  });

  test("a tenant's personality is in every subject", async () => {
    const r = c.withPersonality("researcher");
    assert.equal(r.personality, "researcher");
    const cancels: string[] = [];
    const sub = c.connection.subscribe("capstan.cancel.>", { callback: (_e, m) => { cancels.push(m.subject); } });
    const call = echo("for the researcher");
    await r.submit(call);
    const res = await r.result(call.call_id!, { signal: AbortSignal.timeout(30_000) });
    assert.equal(res.value, "for the researcher");
    assert.equal(call.personality_id, "researcher");
    const jsm = await jetstreamManager(c.connection);
    const stored = await jsm.streams.getMessage("CAPSTAN_RESULTS", { last_by_subj: `capstan.result.researcher.${call.call_id}.${call.call_id}` });
    assert.ok(stored, "the result is on the researcher's result subject");
    assert.equal(await c.lookup(call.call_id!), undefined, "the default personality does not see it");
    assert.deepEqual(await r.lookup(call.call_id!), res);
    await r.cancel(call.call_id!);
    await c.connection.flush();
    await waitUntil(() => cancels.length > 0);
    assert.deepEqual(cancels, [`capstan.cancel.researcher.${call.call_id}`]);
    sub.unsubscribe();
    // A body naming another personality than the subject is refused by the worker.
    const h = natsHeaders();
    h.set("Capstan-Protocol", "2");
    const id = unique("mismatch");
    const js = (await import("@nats-io/jetstream")).jetstream(c.connection);
    await js.publish("capstan.call.default.researcher.echo",
      JSON.stringify({ call_id: id, tool: "echo", session_id: "s", args: { text: "x" }, personality_id: "default" }), { msgID: id, headers: h });
    const mismatch = await r.result(id, { signal: AbortSignal.timeout(30_000) });
    assert.equal(mismatch.error, 'personality_id "default" does not match the subject\'s personality "researcher"');
    assert.throws(() => c.withPersonality("a.b"), TypeError);
  });

  test("catalog: tools({personality}) as the Go client's ToolsFor, and as provider definitions", async () => {
    const all = await c.tools();
    assert.ok(all.some((e) => e.name === "echo" && e.pool === "default"));
    assert.deepEqual(all.map((e) => e.name), [...all.map((e) => e.name)].sort());
    const expected = JSON.parse(process.env.CAPSTAN_TEST_TOOLS_FOR ?? "{}") as Record<string, string[]>;
    assert.ok(Object.keys(expected).length >= 4, "the harness hands over the Go client's ToolsFor");
    for (const [personality, names] of Object.entries(expected)) {
      const got = (await c.tools({ personality })).map((e) => e.name);
      assert.deepEqual(got, names, `tools for ${personality}`);
    }
    await assert.rejects(c.tools({ personality: "ghost" }), UnknownPersonalityError);
    const gated = await c.tools({ personality: "gated" });
    const defs = openAIChatTools(gated);
    const weather = defs.find((d) => d.function.name === "weather");
    assert.deepEqual(weather, { type: "function", function: { name: "weather", description: "Forecast for a city.",
      parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } });
    assert.deepEqual(anthropicTools(gated).find((d) => d.name === "echo")?.input_schema,
      all.find((e) => e.name === "echo")!.schema);
  });

  test("envelopes round trip through the pool: OpenAI Chat, OpenAI Responses, Anthropic", async () => {
    const tmpl = { session_id: "s" };
    const chatID = unique("call");
    const chat = fromOpenAIChat({ role: "assistant", content: null, tool_calls: [
      { id: chatID, type: "function", function: { name: "echo", arguments: '{"text":"from chat"}' } },
      { id: chatID + " mapped", type: "function", function: { name: "echo", arguments: '{"text":"mapped id"}' } },
      { id: chatID + "-bad", type: "function", function: { name: "echo", arguments: '{"text":' } },
    ] }, tmpl);
    const chatOut = toOpenAIChat(chat, await execute(c, chat, { waitMs: 30_000 }));
    assert.deepEqual(chatOut, [
      { role: "tool", tool_call_id: chatID, content: "from chat" },
      { role: "tool", tool_call_id: chatID + " mapped", content: "mapped id" },
      { role: "tool", tool_call_id: chatID + "-bad", content: "input_invalid: invalid tool call: tool_calls[2].function.arguments is not valid JSON" },
    ]);
    assert.ok(chat[1]!.call.call_id.startsWith("cx-"));

    const respID = unique("call");
    const resp = fromOpenAIResponses({ output: [
      { type: "reasoning", id: "rs_1", summary: [] },
      { type: "function_call", id: "fc_1", call_id: respID, name: "echo", arguments: '{"text":"from responses"}', status: "completed" },
      { type: "function_call", id: "fc_2", call_id: respID + "-x", name: "no_such_tool", arguments: "{}", status: "completed" },
    ] }, tmpl);
    assert.deepEqual(toOpenAIResponses(resp, await execute(c, resp, { waitMs: 30_000 })), [
      { type: "function_call_output", call_id: respID, output: "from responses" },
      { type: "function_call_output", call_id: respID + "-x", output: "not_available: Unknown tool: no_such_tool" },
    ]);

    const toolu = unique("toolu");
    const anth = fromAnthropic(JSON.stringify({ role: "assistant", content: [
      { type: "text", text: "Let me run it." },
      { type: "tool_use", id: toolu, name: "echo", input: { text: "from anthropic" } },
      { type: "tool_use", id: toolu + "-2", name: "echo", input: { text: "slow", sleep_ms: 100, progress: [] }, extra: true },
      { type: "tool_use", id: toolu + "-3", name: "echo", input: { nope: 1 } },
    ] }), tmpl);
    const answer = toAnthropic(anth, await execute(c, anth, { waitMs: 30_000 }));
    assert.equal(answer.role, "user");
    assert.deepEqual(answer.content.slice(0, 2), [
      { type: "tool_result", tool_use_id: toolu, content: "from anthropic" },
      { type: "tool_result", tool_use_id: toolu + "-2", content: "slow" },
    ]);
    assert.equal(answer.content[2]!.is_error, true);
    assert.match(answer.content[2]!.content, /^input_invalid: /);
  });

  test("traceparent of the active OpenTelemetry context travels with the call", async () => {
    const als = new AsyncLocalStorage<Context>();
    const manager: ContextManager = {
      active: () => als.getStore() ?? ROOT_CONTEXT,
      with: (ctx, fn, thisArg, ...args) => als.run(ctx, () => fn.call(thisArg, ...args)),
      bind: (_ctx, target) => target,
      enable() { return this; },
      disable() { return this; },
    };
    assert.ok(context.setGlobalContextManager(manager));
    try {
      const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
      const parent = trace.setSpanContext(ROOT_CONTEXT, { traceId, spanId: "00f067aa0ba902b7", traceFlags: 1 });
      const call = echo("traced");
      await context.with(parent, () => c.submit(call));
      const jsm = await jetstreamManager(c.connection);
      // The worker exports no traces, so its result carries the call's own trace context.
      await c.result(call.call_id!, { signal: AbortSignal.timeout(30_000) });
      const m = await jsm.streams.getMessage("CAPSTAN_RESULTS", { last_by_subj: `capstan.result.default.${call.call_id}.${call.call_id}` });
      assert.equal(m?.header.get("traceparent"), `00-${traceId}-00f067aa0ba902b7-01`);
      const untraced = echo("untraced");
      await c.submit(untraced);
      await c.result(untraced.call_id!, { signal: AbortSignal.timeout(30_000) });
      const m2 = await jsm.streams.getMessage("CAPSTAN_RESULTS", { last_by_subj: `capstan.result.default.${untraced.call_id}.${untraced.call_id}` });
      assert.equal(m2?.header.get("traceparent") ?? "", "", "no active context, no traceparent");
    } finally {
      context.disable();
    }
  });
});

describe("connecting", { skip: noPool }, () => {
  test("without the embedded server's credentials the connection is refused", async () => {
    await assert.rejects(CapstanClient.connect({ servers: natsURL }), ClientError);
  });
  test("options are checked and named", async () => {
    await assert.rejects(CapstanClient.connect({ servers: "", personality: "a b" }),
      /options.servers must be set; options.personality "a b" must match/);
  });
  test("an inbox prefix for a tenant's NATS user", async () => {
    const c = await connect({ inboxPrefix: "_INBOX_researcher", personality: "researcher" });
    try {
      assert.equal(await c.run(echo("inbox")), "inbox");
    } finally {
      await c.close();
    }
    await assert.rejects(c.submit(echo("closed")), ClientError);
  });
});

async function waitUntil(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}
