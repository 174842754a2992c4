// Large outputs by reference against a real pool (node_test.go): the worker
// stores a cut value or a left-out structured payload as a blob, and the
// client reads it back from its chunk subject, checking size and SHA-256.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { jetstream } from "@nats-io/jetstream";
import {
  AbortError, BlobCorruptError, BlobNotFoundError, ClientError, NoBlobError, blobChunkSubject,
  type CapstanClient, type Call, type Result,
} from "../src/index.js";
import { mcpResult, text as envelopeText } from "../src/envelope/index.js";
import { connect, noPool } from "./helpers.js";

const wait = () => ({ signal: AbortSignal.timeout(30_000) });

/** Rows of the harness's report tool (node_test.go, reportRows). */
const REPORT_ROWS = 8000;

async function run(c: CapstanClient, call: Call): Promise<Result> {
  const { callID } = await c.submit(call);
  return c.result(callID, wait());
}

async function collect(it: AsyncIterable<Uint8Array>): Promise<{ chunks: Uint8Array[]; error?: unknown }> {
  const chunks: Uint8Array[] = [];
  try {
    for await (const ch of it) chunks.push(ch);
  } catch (error) {
    return { chunks, error };
  }
  return { chunks };
}

/** Whether a NATS subject matches a pattern with * and > wildcards. */
function matches(pattern: string, subject: string): boolean {
  const p = pattern.split("."), s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}

describe("blobs against a real pool", { skip: noPool }, () => {
  let c: CapstanClient;
  const text = "0123456789".repeat(20_000); // 200,000 characters; the default budget is 80,000
  let cut: Result;
  before(async () => {
    c = await connect();
    cut = await run(c, { tool: "echo", session_id: "s", args: { text } });
  });
  after(async () => { await c.close(); });

  test("a cut value comes back whole from its blob, its digest checked", async () => {
    assert.equal(cut.ok, true, `${cut.code}: ${cut.error}`);
    assert.equal(cut.truncated, true);
    assert.equal(cut.original_chars, 200_000);
    const ref = cut.blob!;
    assert.ok(ref, "the worker stored the whole value");
    assert.deepEqual([ref.bucket, ref.name, ref.part, ref.content_type, ref.size],
      ["capstan_blobs", `default/${cut.call_id}`, "value", "text/plain; charset=utf-8", 200_000]);
    assert.match(ref.nuid, /^default\.[A-Za-z0-9_-]+$/);
    assert.equal(blobChunkSubject(ref), `$O.capstan_blobs.C.${ref.nuid}`);

    const bytes = await c.blob(cut, wait());
    assert.ok(new TextDecoder().decode(bytes) === text, "the whole value");
    assert.equal(createHash("sha256").update(bytes).digest("hex"), ref.sha256);

    const { chunks, error } = await collect(c.blobChunks(cut, wait()));
    assert.equal(error, undefined);
    assert.ok(chunks.length >= 2, `chunks of at most 128 KiB: got ${chunks.length}`);
    assert.ok(chunks.every((ch) => ch.length <= 128 << 10));
    assert.ok(Buffer.concat(chunks).equals(Buffer.from(text)), "the chunks in order");

    // What a model is given says where the whole output is.
    assert.ok(envelopeText(cut).startsWith(cut.value! + "\n"));
    assert.ok(envelopeText(cut).endsWith(`\n[full output (200000 bytes) stored as blob capstan_blobs/default/${cut.call_id}]`),
      envelopeText(cut).slice(-200));
  });

  test("a result without a blob is NoBlobError", async () => {
    const short = await run(c, { tool: "echo", session_id: "s", args: { text: "short" } });
    assert.equal(short.blob, undefined);
    await assert.rejects(c.blob(short), (e: unknown) => e instanceof NoBlobError && e instanceof ClientError &&
      e.callID === short.call_id && e.message === `capstan: blob of ${short.call_id}: the result refers to no blob`);
    await assert.rejects(collect(c.blobChunks(short)).then((r) => { throw r.error; }), NoBlobError);
  });

  test("a reference that the stored bytes do not match is BlobCorruptError", async () => {
    const ref = cut.blob!;
    const where = `capstan: blob capstan_blobs/default/${cut.call_id}: blob does not match its reference: `;
    const wrongDigest = { ...cut, blob: { ...ref, sha256: "0".repeat(64) } };
    await assert.rejects(c.blob(wrongDigest, wait()), (e: unknown) => e instanceof BlobCorruptError &&
      e.message === `${where}SHA-256 ${ref.sha256}, the reference says ${"0".repeat(64)}` && e.ref === wrongDigest.blob);
    // The chunks are passed on; the end of the iteration is the error.
    const { chunks, error } = await collect(c.blobChunks(wrongDigest, wait()));
    assert.ok(error instanceof BlobCorruptError);
    assert.equal(Buffer.concat(chunks).length, ref.size);

    await assert.rejects(c.blob({ ...cut, blob: { ...ref, size: ref.size - 1 } }, wait()), (e: unknown) =>
      e instanceof BlobCorruptError && e.message === `${where}more than its ${ref.size - 1} bytes are stored`);
    await assert.rejects(c.blob({ ...cut, blob: { ...ref, size: ref.size + 1 } }, wait()), (e: unknown) =>
      e instanceof BlobCorruptError && e.message === `${where}${ref.size} bytes stored, the reference says ${ref.size + 1}`);
  });

  test("chunks that are not stored are BlobNotFoundError; a malformed reference a ClientError", async () => {
    const ref = cut.blob!;
    await assert.rejects(c.blob({ ...cut, blob: { ...ref, nuid: "default.NOTSTORED" } }, wait()), (e: unknown) =>
      e instanceof BlobNotFoundError &&
      e.message === `capstan: blob capstan_blobs/default/${cut.call_id}: blob not found (expired, or never completely stored)`);
    for (const [patch, msg] of [
      [{ nuid: "nodot" }, 'blob nuid "nodot" must be <personality>.<token>'],
      [{ nuid: "default.a.b" }, 'blob nuid "default.a.b" must be <personality>.<token>'],
      [{ bucket: "capstan_blobs.x" }, 'blob bucket "capstan_blobs.x" must match ^[A-Za-z0-9_-]{1,128}$'],
      [{ sha256: "abc" }, 'sha256 "abc" is not a hex SHA-256 digest'],
    ] as const) {
      await assert.rejects(c.blob({ ...cut, blob: { ...ref, ...patch } }), (e: unknown) =>
        e instanceof ClientError && !(e instanceof BlobCorruptError) && e.message === `capstan: blob of ${cut.call_id}: ${msg}`);
    }
  });

  test("an aborted signal ends the read", async () => {
    const ac = new AbortController();
    ac.abort(new Error("stop"));
    await assert.rejects(c.blob(cut, { signal: ac.signal }), (e: unknown) =>
      e instanceof AbortError && (e.cause as Error).message === "stop");
    // Aborted while the chunks arrive: the iteration ends with AbortError.
    const mid = new AbortController();
    const { chunks, error } = await collect((async function* () {
      for await (const ch of c.blobChunks(cut, { signal: mid.signal })) {
        mid.abort(new Error("enough"));
        yield ch;
      }
    })());
    assert.ok(error instanceof AbortError, String(error));
    assert.ok(chunks.length >= 1 && Buffer.concat(chunks).length < cut.blob!.size, "not the whole blob");
  });

  test("the read uses only what a tenant may: one-filter consumer on its chunk subject, no stream info or metadata", async () => {
    const spy = await connect({ inboxPrefix: "_INBOX_blobspy" });
    const requests: string[] = [];
    const sub = c.connection.subscribe("$JS.API.>", {
      callback: (_e, m) => { if (m.reply?.startsWith("_INBOX_blobspy.")) requests.push(m.subject); },
    });
    try {
      await c.connection.flush();
      assert.equal(new TextDecoder().decode(await spy.blob(cut, wait())), text);
      await spy.connection.flush();
      await c.connection.flush();
    } finally {
      sub.unsubscribe();
      await spy.close();
    }
    // What deploy/nats/auth.conf grants a tenant of personality "default".
    const tenant = [
      "$JS.API.CONSUMER.CREATE.OBJ_capstan_blobs.*.$O.capstan_blobs.C.default.>",
      "$JS.API.CONSUMER.MSG.NEXT.OBJ_capstan_blobs.*",
      "$JS.API.CONSUMER.DELETE.OBJ_capstan_blobs.*",
    ];
    const blobRequests = requests.filter((s) => s.includes("OBJ_"));
    assert.ok(blobRequests.some((s) => s.endsWith(".$O.capstan_blobs.C." + cut.blob!.nuid)), `requests: ${blobRequests}`);
    for (const s of blobRequests) assert.ok(tenant.some((p) => matches(p, s)), `${s} is not granted to a tenant`);
  });

  test("a structured payload left out of the message is in its blob", async () => {
    const r = await run(c, { tool: "report", session_id: "s" });
    assert.equal(r.ok, true, `${r.code}: ${r.error}`);
    assert.equal(r.value, `report of ${REPORT_ROWS} rows`);
    assert.equal(r.structured, undefined);
    assert.equal(r.structured_omitted, true);
    assert.deepEqual([r.blob?.part, r.blob?.content_type], ["structured", "application/json"]);
    const payload = JSON.parse(new TextDecoder().decode(await c.blob(r, wait()))) as { rows: Array<{ n: number; label: string }> };
    assert.equal(payload.rows.length, REPORT_ROWS);
    const shown = mcpResult(r);
    assert.equal(shown.structuredContent, undefined);
    assert.equal(shown.content[0]!.text,
      `report of ${REPORT_ROWS} rows\n[structured content (${r.blob!.size} bytes) left out; stored as blob capstan_blobs/default/${r.call_id}]`);
    assert.deepEqual(payload.rows[REPORT_ROWS - 1], { n: REPORT_ROWS - 1, label: `row ${String(REPORT_ROWS - 1).padStart(5, "0")} of the report` });
  });

  test("stored bytes changed behind the reference are BlobCorruptError", async () => {
    const r = await run(c, { tool: "echo", session_id: "s", args: { text: "abcdefghij".repeat(10_000) } });
    const ref = r.blob!;
    await jetstream(c.connection).publish(blobChunkSubject(ref), "tampered");
    await assert.rejects(c.blob(r, wait()), (e: unknown) =>
      e instanceof BlobCorruptError && e.reason === `more than its ${ref.size} bytes are stored`);
  });
});
