// The client as a tenant: connected as the NATS user "tenant-researcher" of
// deploy/nats/auth.conf to a server started from that configuration, against
// the real worker binary (both started by the Go harness, node_test.go,
// TestTypeScriptClientAsTenant). Everything the client does must be what
// the tenant's permissions allow, and the server must refuse it everything
// of the other tenant's personality, "support".

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  CancelledError, CapstanClient, ClientError, PermissionDeniedError, type Call, type Progress,
} from "../src/index.js";
import { unique } from "./helpers.js";

const url = process.env.CAPSTAN_TEST_TENANT_URL ?? "";
const user = process.env.CAPSTAN_TEST_TENANT_USER ?? "";
const pass = process.env.CAPSTAN_TEST_TENANT_PASS ?? "";
const noTenant: string | false = url === ""
  ? "no deploy/nats server: run these through `go test ./clients/typescript/` (TestTypeScriptClientAsTenant)"
  : false;

const echo = (text: string, extra: Record<string, unknown> = {}): Call =>
  ({ tool: "echo", session_id: "s", args: { text, ...extra } });

const denied = (e: unknown) => e instanceof PermissionDeniedError && e instanceof ClientError;

describe("a tenant's NATS user against the real worker binary", { skip: noTenant }, () => {
  let c: CapstanClient;
  before(async () => {
    c = await CapstanClient.connect({
      servers: url, user, pass, personality: "researcher", inboxPrefix: "_INBOX_researcher", name: "ts-tenant",
    });
  });
  after(async () => { await c.close(); });

  test("executeParallel in input order, result, lookup", async () => {
    const calls = Array.from({ length: 100 }, (_, i) => echo(`tenant ${i}`));
    const batchID = unique("tenant");
    const results = await c.executeParallel(calls, { batchID, waitMs: 60_000 });
    results.forEach((r, i) => {
      assert.equal(r.ok, true, `call ${i}: ${r.code} ${r.error}`);
      assert.equal(r.value, `tenant ${i}`);
      assert.equal(r.batch_id, batchID);
    });
    const one = echo("one");
    await c.submit(one);
    const r = await c.result(one.call_id!, { signal: AbortSignal.timeout(30_000) });
    assert.equal(r.value, "one");
    assert.deepEqual(await c.lookup(one.call_id!), r);
    assert.equal(await c.run(echo("run")), "run");
  });

  test("progress for its audience only", async () => {
    const batchID = unique("tprogress");
    const progress = [
      { message: "for the user", audience: "user" },
      { message: "for the dashboard", audience: "dashboard" },
      { message: "internal" },
    ];
    const [r] = await c.executeParallel([echo("done", { progress })], { batchID, waitMs: 30_000 });
    assert.equal(r!.ok, true, `${r!.code} ${r!.error}`);
    const got: Progress[] = [];
    for await (const p of c.progress({ audience: "user", batchID, fromStart: true, signal: AbortSignal.timeout(2000) })) {
      got.push(p);
    }
    assert.deepEqual(got.map((p) => [p.message, p.audience]), [["for the user", "user"]]);
  });

  test("cancel a sleeping echo", async () => {
    const batchID = unique("tcancel");
    const started = c.progress({ batchID, fromStart: true, signal: AbortSignal.timeout(30_000) });
    const call: Call = { ...echo("slow", { sleep_ms: 60_000, progress: [{ message: "sleeping" }] }), batch_id: batchID };
    const run = c.run(call, { signal: AbortSignal.timeout(30_000) });
    for await (const p of started) {
      assert.equal(p.message, "sleeping");
      break;
    }
    await c.cancel(call.call_id!, "no longer needed");
    await assert.rejects(run, (e: unknown) => e instanceof CancelledError && e.message === "cancelled: no longer needed");
  });

  test("a large result by reference", async () => {
    const text = "researcher ".repeat(20_000);
    const [r] = await c.executeParallel([echo(text)], { waitMs: 30_000 });
    assert.equal(r!.ok, true, `${r!.code} ${r!.error}`);
    assert.ok(r!.blob, "the worker stored the whole text");
    assert.equal(r!.blob.name, `researcher/${r!.call_id}`);
    const bytes = await c.blob(r!, { signal: AbortSignal.timeout(30_000) });
    assert.equal(new TextDecoder().decode(bytes), text);
  });

  test("the catalog and its own personality", async () => {
    const names = (await c.tools({ personality: "researcher" })).map((t) => t.name);
    assert.ok(names.includes("echo"), names.join(","));
    assert.match(await c.personalityDocument("researcher"), /id: researcher/);
  });

  test("the server refuses everything of another tenant's personality", async () => {
    const other = c.withPersonality("support");
    const wait = { signal: AbortSignal.timeout(15_000) };
    await assert.rejects(other.submit(echo("borrowed")), denied);
    await assert.rejects(other.result(unique("call"), wait), denied);
    await assert.rejects(other.lookup(unique("call"), wait), denied);
    await assert.rejects(other.personalityDocument("support", wait), denied);
    await assert.rejects((async () => {
      for await (const _ of other.progress({ signal: AbortSignal.timeout(15_000) })) break;
    })(), denied);
    // Its own calls still run on the same connection afterwards.
    assert.equal(await c.run(echo("still here")), "still here");
  });

  test("approvals: the server refuses a tenant every decision its personality was not granted, and the bucket", async () => {
    const wait = { signal: AbortSignal.timeout(15_000) };
    const call = unique("call");
    // deploy/nats grants self decisions to tenant-support only (its
    // personality approves its own calls); researcher's are refused.
    await assert.rejects(c.approveOwn(call, "0".repeat(64), wait), denied);
    await assert.rejects(c.denyOwn(call, "no", wait), denied);
    // The held calls are an approver's to read, and so are other personalities' self subjects.
    await assert.rejects(c.holds(undefined, wait), denied);
    await assert.rejects(c.findHold(call, wait), denied);
    await assert.rejects(c.approve(call, "0".repeat(64), wait), denied);
    await assert.rejects(c.withPersonality("support").approveOwn(call, "0".repeat(64), wait), denied);
  });

  test("a wrong password is refused", async () => {
    await assert.rejects(CapstanClient.connect({ servers: url, user, pass: pass + "-wrong" }),
      (e: unknown) => e instanceof ClientError && /refused the credentials/.test(e.message));
  });

  test("user and pass go together, and not with creds", async () => {
    await assert.rejects(CapstanClient.connect({ servers: url, user }),
      /options.user and options.pass go together: set both or neither/);
    await assert.rejects(CapstanClient.connect({ servers: url, user, pass, creds: "x.creds" }),
      /options.user and options.creds are two ways to authenticate: set one/);
  });
});
