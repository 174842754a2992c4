// Approvals against a real pool (started by the Go harness, node_test.go):
// personality "ops" holds echo calls whose text is "pay" or "refund" until
// alice or bob decides them; "opsself" holds every echo call and lets its
// caller decide it (approval.self).

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import {
  CapstanClient, ClientError, DecisionRefusedError, Names, NoWorkerError, NotAvailableError, type ApprovalRequest,
  type Call, type Hold,
} from "../src/index.js";
import { compareTimes, decide } from "../src/approvals.js";
import { connect, noPool, unique } from "./helpers.js";

/**
 * The canonical JSON of approvals.md, written independently of the client
 * for simple values: keys sorted, no spaces, numbers as JSON.stringify
 * writes them (as the test sends them).
 */
function canonical(v: unknown): string {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  const o = v as Record<string, unknown>;
  return "{" + Object.keys(o).sort().map((k) => JSON.stringify(k) + ":" + canonical(o[k])).join(",") + "}";
}

/** The args_sha256 a decision on a call of personality p must name. */
function argsSHA256(p: string, tool: string, args: Record<string, unknown>): string {
  return createHash("sha256").update(canonical({ args, personality_id: p, tool })).digest("hex");
}

/** Polls cond every 20 ms until it returns a value other than undefined, for at most 30 s. */
async function eventually<T>(what: string, cond: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const v = await cond();
    if (v !== undefined) return v;
    if (Date.now() > deadline) assert.fail(`${what}: not within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const refusedWith = (reason: string) => (e: unknown) =>
  e instanceof DecisionRefusedError && e.reason === reason && e.message.endsWith(": " + reason);

const echo = (text: string, extra: Record<string, unknown> = {}): Call =>
  ({ tool: "echo", session_id: "s", args: { text, ...extra } });

describe("approvals against a real pool", { skip: noPool }, () => {
  let c: CapstanClient;
  before(async () => { c = await connect({ personality: "ops", approverName: "alice" }); });
  after(async () => { await c.close(); });

  const held = (callID: string) => eventually(`call ${callID} held`, () => c.findHold(callID));
  const gone = (callID: string) => eventually(`call ${callID} leaves the list`,
    async () => ((await c.findHold(callID)) === undefined ? true : undefined));

  test("a held call: listed with its hash, refused a wrong hash, approved, run once", async () => {
    const batchID = unique("appr");
    const args = { text: "pay", sleep_ms: 0 };
    const call: Call = { ...echo("pay", { sleep_ms: 0 }), batch_id: batchID };
    await c.submit(call);
    const id = call.call_id!;
    const want = argsSHA256("ops", "echo", args);

    const h = await held(id);
    assert.equal(h.args_sha256, want);
    assert.deepEqual([h.call_id, h.batch_id, h.personality_id, h.tool], [id, batchID, "ops", "echo"]);
    assert.deepEqual(h.summary.args, args);
    assert.deepEqual(Object.keys(h.summary.grant).sort(),
      ["binaries", "hosts", "kv", "read_paths", "secrets", "write_paths"]);
    assert.ok(Math.abs(Date.parse(h.expires_at) - Date.parse(h.held_at) - 3_600_000) < 1000, "approval.timeout 1h");
    assert.equal((h as unknown as Record<string, unknown>).call, undefined, "the stored call body is not listed");
    const mine = (hs: Hold[]) => hs.filter((x) => x.call_id === id);
    assert.deepEqual(mine(await c.holds("ops")), [h]);
    assert.deepEqual(mine(await c.holds()), [h]);
    assert.deepEqual(mine(await c.holds("gated")), []);

    // The approval_required event, to the user's audience.
    let event: ApprovalRequest | undefined;
    for await (const r of c.approvalRequests({ fromStart: true, signal: AbortSignal.timeout(30_000) })) {
      if (r.call_id === id) {
        event = r;
        break;
      }
    }
    assert.ok(event, "an approval_required event");
    assert.deepEqual([event.tool, event.args_sha256, event.expires_at], ["echo", want, h.expires_at]);
    assert.deepEqual(event.summary, h.summary);

    await assert.rejects(c.approve(id, "0".repeat(64)), refusedWith("approval does not match the call's arguments"));
    await assert.rejects(c.approve(id, want, { by: "mallory" }),
      refusedWith("mallory is not an approver of personality ops (approval.approvers)"));
    assert.equal((await c.findHold(id))?.call_id, id, "still held after the refusals");
    assert.equal(await c.lookup(id), undefined, "no result while held");

    const d = await c.approve(id, want, { reason: "looks right" });
    assert.deepEqual([d.callID, d.decision, d.by], [id, "approved", "alice"]);
    assert.ok(!Number.isNaN(Date.parse(d.at)), d.at);
    const r = await c.result(id, { batchID, signal: AbortSignal.timeout(30_000) });
    assert.equal(r.ok, true, `${r.code} ${r.error}`);
    assert.equal(r.value, "pay");
    await gone(id);

    await assert.rejects(c.approve(id, want, { by: "bob" }), refusedWith("already approved by alice"));
    await assert.rejects(c.deny(id, "too late", { by: "bob" }), refusedWith("already approved by alice"));
    const history = (await c.decisions("ops")).filter((x) => x.hold.call_id === id);
    assert.equal(history.length, 1);
    assert.deepEqual([history[0]!.decision, history[0]!.by, history[0]!.hold.args_sha256], ["approved", "alice", want]);
  });

  test("deny: the result is not_available APPROVAL_DENIED with the reason", async () => {
    const call = echo("refund");
    const run = c.run(call, { signal: AbortSignal.timeout(30_000) });
    const id = await eventually("submitted", async () => call.call_id);
    await held(id);
    const d = await c.deny(id, "not on a Friday", { by: "bob" });
    assert.deepEqual([d.decision, d.by], ["denied", "bob"]);
    await assert.rejects(run, (e: unknown) =>
      e instanceof NotAvailableError && e.message === "APPROVAL_DENIED: not on a Friday" && e.result.duration_ms === 0);
    await gone(id);
    await assert.rejects(c.approve(id, argsSHA256("ops", "echo", { text: "refund" })), refusedWith("already denied by bob"));
    const [rec] = (await c.decisions()).filter((x) => x.hold.call_id === id);
    assert.deepEqual([rec?.decision, rec?.by, rec?.reason], ["denied", "bob", "not on a Friday"]);
  });

  test("a call the section does not name runs at once; a call that is not held is refused", async () => {
    assert.equal(await c.run(echo("hello"), { signal: AbortSignal.timeout(30_000) }), "hello");
    const nope = unique("nope");
    await assert.rejects(c.approve(nope, "0".repeat(64)), refusedWith(`no held call ${nope}`));
    await assert.rejects(c.deny(nope, "no"), refusedWith(`no held call ${nope}`));
  });

  test("the caller's own decisions need approval.self", async () => {
    const own = c.withPersonality("opsself");
    const a = echo("mine");
    await own.submit(a);
    const h = await held(a.call_id!);
    assert.equal(h.personality_id, "opsself");
    const d = await own.approveOwn(a.call_id!, argsSHA256("opsself", "echo", { text: "mine" }), { by: "the-user" });
    assert.deepEqual([d.decision, d.by], ["approved", "the-user"]);
    assert.equal(await own.run({ ...a }, { signal: AbortSignal.timeout(30_000) }), "mine", "its result, once");

    const b = echo("not mine");
    await own.submit(b);
    await held(b.call_id!);
    await own.denyOwn(b.call_id!, "changed my mind");
    const r = await own.result(b.call_id!, { signal: AbortSignal.timeout(30_000) });
    assert.deepEqual([r.ok, r.code, r.error], [false, "not_available", "APPROVAL_DENIED: changed my mind"]);

    // ops does not set approval.self.
    const x = echo("pay");
    await c.submit(x);
    await held(x.call_id!);
    await assert.rejects(c.approveOwn(x.call_id!, argsSHA256("ops", "echo", { text: "pay" })),
      refusedWith("personality ops does not let a caller approve its own calls (approval.self is false)"));
    await c.deny(x.call_id!, "cleanup");
  });

  test("requests are checked before they are sent", async () => {
    await assert.rejects(c.approve("c1", ""), { name: "TypeError", message: "capstan: decide c1: args_sha256: is required to approve" });
    await assert.rejects(c.deny("c1", "  "), { name: "TypeError", message: "capstan: decide c1: reason: is required to deny" });
    await assert.rejects(c.deny("c1", "é".repeat(501)),
      { name: "TypeError", message: "capstan: decide c1: reason: must be at most 500 characters (it has 501)" });
    await assert.rejects(c.approve("a.b", "x"), /capstan: decide: call_id "a.b" must match/);
    await assert.rejects(c.holds("a>"), /capstan: approvals: personality "a>" must match/);
  });

  test("no worker answering is NoWorkerError", async () => {
    const nc = c.connection;
    const bus = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }), names: new Names("nobody") };
    await assert.rejects(decide(bus, "c1", true, "ops", { decision: "denied", reason: "r", by: "alice" }, {}),
      (e: unknown) => e instanceof NoWorkerError && e instanceof ClientError && e.callID === "c1" &&
        e.message === "capstan: decide c1: no worker answers decision requests");
  });
});

test("compareTimes orders RFC 3339 times to the nanosecond", () => {
  const times = ["2026-01-02T15:04:05.000000002Z", "2026-01-02T15:04:05Z", "2026-01-02T16:04:05.5+02:00",
    "2026-01-02T15:04:05.000000001Z"];
  assert.deepEqual([...times].sort(compareTimes), [
    "2026-01-02T16:04:05.5+02:00", "2026-01-02T15:04:05Z", "2026-01-02T15:04:05.000000001Z",
    "2026-01-02T15:04:05.000000002Z",
  ]);
});

test("approval subjects and bucket", () => {
  const n = new Names("capstan");
  assert.equal(n.approvalsBucket, "capstan_approvals");
  assert.equal(n.approvalSubject("ops", "c1"), "capstan.approval.decide.ops.c1");
  assert.equal(n.approvalSelfSubject("ops", "c1"), "capstan.approval.self.ops.c1");
  assert.throws(() => n.approvalSubject("o.p", "c1"), /personality "o.p" must match/);
});

test("the canonical JSON of the test", () => {
  assert.equal(canonical({ args: { text: "pay", sleep_ms: 0 }, personality_id: "ops", tool: "echo" }),
    '{"args":{"sleep_ms":0,"text":"pay"},"personality_id":"ops","tool":"echo"}');
});
