// Pure parts: the call checks (the worker decoder's messages), names, the
// personality gates and typed errors.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  CancelledError, ExecutionFailedError, InputInvalidError, Names, NotAvailableError, ResultMissingError,
  StaleWriteError, ToolError, blobChunkSubject, encodeCall, mayCall, parsePersonality, permissionMatch, toolError, unwrap,
  type CatalogEntry, type Result,
} from "../src/index.js";

test("encodeCall checks a call as a worker decodes it", () => {
  const base = { call_id: "c1", tool: "echo", session_id: "s", args: { text: "x" } };
  const cases: Array<[string, Record<string, unknown>, string | undefined]> = [
    ["valid", {}, undefined],
    ["call_id not a token", { call_id: "a b" }, 'invalid call: field "call_id" must match ^[A-Za-z0-9_-]{1,128}$'],
    ["empty call_id", { call_id: "" }, 'invalid call: field "call_id" must not be empty'],
    ["batch_id not a token", { batch_id: "a.b" }, 'invalid call: field "batch_id" must match ^[A-Za-z0-9_-]{1,128}$'],
    ["tool too long", { tool: "t".repeat(129) }, 'invalid call: field "tool" must match ^[A-Za-z0-9_-]{1,128}$'],
    ["args an array", { args: [1] }, 'invalid call: field "args" must be a JSON object'],
    ["empty session", { session_id: "" }, 'invalid call: field "session_id" must not be empty'],
    ["relative working_dir", { working_dir: "x/y" }, 'invalid call: field "working_dir" must be an absolute path'],
    ["negative turn", { current_turn: -1 }, 'invalid call: field "current_turn" must be an integer of at least 0'],
    ["fractional budget", { result_budget_chars: 1.5 }, 'invalid call: field "result_budget_chars" must be an integer greater than 0'],
    ["string timeout", { timeout_ms: "30000" }, 'invalid call: field "timeout_ms" must be an integer greater than 0'],
    ["dry_run not a boolean", { dry_run: "yes" }, 'invalid call: field "dry_run" must be true or false'],
    ["deadline not RFC 3339", { deadline: "tomorrow" }, 'invalid call: field "deadline" must be an RFC 3339 time such as 2026-01-02T15:04:05Z'],
    ["deadline a Date", { deadline: new Date("2026-01-02T15:04:05Z") }, undefined],
    ["exclude_tools not strings", { exclude_tools: [1] }, 'invalid call: field "exclude_tools" must be an array of strings'],
    ["over 1 MiB", { args: { text: "x".repeat(1 << 20) } }, undefined],
  ];
  for (const [name, patch, want] of cases) {
    const enc = encodeCall({ ...base, ...patch } as never);
    if (name === "over 1 MiB") {
      assert.equal(enc.ok, false);
      assert.match((enc as { error: string }).error, /^invalid call: call is \d+ bytes, more than the 1 MiB limit$/);
      continue;
    }
    assert.equal(enc.ok ? undefined : enc.error, want, name);
  }
  const enc = encodeCall({ tool: "echo", session_id: "s", call_id: "c", current_turn: 0, dry_run: false, narrow_tools: [] });
  assert.ok(enc.ok);
  assert.deepEqual(enc.wire, { call_id: "c", tool: "echo", args: {}, session_id: "s", narrow_tools: [] },
    "zero values are left out as the Go client leaves them out; an empty narrow_tools is kept");
});

test("names of protocol version 2", () => {
  const n = new Names("capstan");
  assert.equal(n.callSubject("default", "researcher", "echo"), "capstan.call.default.researcher.echo");
  assert.equal(n.resultSubject("researcher", "b", "c"), "capstan.result.researcher.b.c");
  assert.equal(n.callResultFilter("researcher", "c"), "capstan.result.researcher.*.c");
  assert.equal(n.progressTail("user", "researcher", undefined), "capstan.progress.user.researcher.*.*");
  assert.equal(n.progressTail(undefined, "r", "b"), "capstan.progress.*.r.b.*");
  assert.equal(n.cancelSubject("researcher", "c"), "capstan.cancel.researcher.c");
  assert.equal(n.resultsStream, "CAPSTAN_RESULTS");
  assert.throws(() => n.callSubject("default", "a.b", "echo"), /personality "a.b" must match/);
  assert.throws(() => new Names("a>"), /subject prefix/);
  assert.equal(new Names("acme").blobsBucket, "acme_blobs");
});

test("a blob's chunk subject, as Go's BlobRef.ChunkSubject", () => {
  assert.equal(blobChunkSubject({ bucket: "capstan_blobs", nuid: "researcher.JQX5GNV4" }), "$O.capstan_blobs.C.researcher.JQX5GNV4");
  for (const [ref, msg] of [
    [{ bucket: "capstan_blobs", nuid: "JQX5GNV4" }, 'blob nuid "JQX5GNV4" must be <personality>.<token>'],
    [{ bucket: "capstan_blobs", nuid: "a.b.c" }, 'blob nuid "a.b.c" must be <personality>.<token>'],
    [{ bucket: "capstan_blobs", nuid: ".x" }, 'blob nuid ".x" must be <personality>.<token>'],
    [{ bucket: "capstan_blobs", nuid: "a.>" }, 'blob nuid "a.>" must be <personality>.<token>'],
    [{ bucket: "", nuid: "a.b" }, "blob bucket must not be empty"],
  ] as const) {
    assert.throws(() => blobChunkSubject(ref), { name: "TypeError", message: msg });
  }
});

const entry = (e: Partial<CatalogEntry>): CatalogEntry => ({
  name: "t", description: "", schema: { type: "object" }, toolset: "", capabilities: {}, permissions: [],
  output_is_untrusted: false, always_include: false, max_result_chars: 0, pool: "default", workers: [], updated: "", ...e,
});

test("personality gates", () => {
  const p = parsePersonality(`
id: gated
toolset: [echo, web]
mcp_servers: [fs]
permissions: ["weather:*"]
fs_reach:
  workdir: /srv/\${PERSONALITY}
  read: ["\${WORKDIR}/data", /etc/app/]
safety:
  network:
    allow: ["*.example.com", "10.0.0.0/8:*"]
    deny: [secret.example.com]
`, "/home/u");
  assert.deepEqual(p.fsRead, ["/srv/gated/data", "/etc/app"]);
  const cases: Array<[string, Partial<CatalogEntry>, boolean]> = [
    ["in toolset by name", { name: "echo", toolset: "debug" }, true],
    ["in toolset by label", { name: "fetch_url", toolset: "web" }, true],
    ["not in toolset", { name: "terminal", toolset: "terminal" }, false],
    ["always_include", { name: "clock", toolset: "x", always_include: true }, true],
    ["mcp server listed", { name: "mcp__fs__read" }, true],
    ["mcp server not listed", { name: "mcp__git__log" }, false],
    ["plugin not listed", { name: "echo", plugin: "p1" }, false],
    ["permission granted by ns:*", { name: "echo", permissions: ["weather:read"] }, true],
    ["permission missing", { name: "echo", permissions: ["mail:send"] }, false],
    ["host covered", { name: "echo", capabilities: { network: { allowed_hosts: ["api.example.com"] } } }, true],
    ["host denied", { name: "echo", capabilities: { network: { allowed_hosts: ["secret.example.com"] } } }, false],
    ["host outside", { name: "echo", capabilities: { network: { allowed_hosts: ["example.org"] } } }, false],
    ["port outside default", { name: "echo", capabilities: { network: { allowed_hosts: ["api.example.com:8443"] } } }, false],
    ["ip in any-port prefix", { name: "echo", capabilities: { network: { allowed_hosts: ["10.1.2.0/24:5432"] } } }, true],
    ["host star", { name: "echo", capabilities: { network: { allowed_hosts: ["*"] } } }, true],
    ["path covered", { name: "echo", capabilities: { fs_reach: { read: ["/srv/gated/data/x"] } } }, true],
    ["path outside", { name: "echo", capabilities: { fs_reach: { read: ["/srv/other"] } } }, false],
    ["write not granted", { name: "echo", capabilities: { fs_reach: { write: ["/srv/gated/data"] } } }, false],
    ["from-personality", { name: "echo", capabilities: { fs_reach: { read: "from-personality" } } }, true],
  ];
  for (const [name, e, want] of cases) assert.equal(mayCall(entry(e), p), want, name);
  assert.equal(mayCall(entry({ name: "anything" }), parsePersonality("id: open\n")), true, "no toolset key: every built-in tool");
  assert.equal(permissionMatch("weather:*", "weather"), false);
  assert.equal(permissionMatch("*", "x:y"), true);
});

test("typed errors carry the protocol's code and message", () => {
  const r = (code: Result["code"], error: string): Result =>
    ({ call_id: "c", batch_id: "c", tool: "t", ok: false, code, error, duration_ms: 0 });
  const cases: Array<[Result, new (...a: never[]) => ToolError]> = [
    [r("input_invalid", "bad"), InputInvalidError],
    [r("not_available", "Unknown tool: x"), NotAvailableError],
    [r("STALE_WRITE", "changed"), StaleWriteError],
    [r("execution_failed", "boom"), ExecutionFailedError],
    [r("execution_failed", "Tool result missing: no result before deadline"), ResultMissingError],
    [r("execution_failed", "cancelled: by request"), CancelledError],
  ];
  for (const [res, cls] of cases) {
    const e = toolError(res)!;
    assert.ok(e instanceof cls, `${res.code} ${res.error} is ${cls.name}`);
    assert.ok(e instanceof ToolError);
    assert.equal(e.code, res.code);
    assert.equal(e.message, res.error);
    assert.equal(e.callID, "c");
    assert.throws(() => unwrap(res), cls);
  }
  assert.ok(toolError(r("execution_failed", "cancelled: x")) instanceof ExecutionFailedError);
  assert.equal(unwrap({ call_id: "c", batch_id: "c", tool: "t", ok: true, value: "v", duration_ms: 0 }), "v");
});
