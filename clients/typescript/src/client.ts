// CapstanClient: publishes tool calls over NATS JetStream following the
// version-2 wire protocol (docs/protocol.md) and collects their results,
// progress events and the tool catalog. The same semantics as the Go client
// (client/*.go), idiomatic for TypeScript.

import { readFile } from "node:fs/promises";
import {
  connect,
  credsAuthenticator,
  headers as natsHeaders,
  nkeyAuthenticator,
  type Authenticator,
  type NatsConnection,
} from "@nats-io/transport-node";
import {
  AckPolicy,
  DeliverPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import { Kvm, type KvWatchEntry } from "@nats-io/kv";
import {
  approvalRequest,
  decide,
  findHold,
  listDecisions,
  listHolds,
  type ApproveOptions,
  type DecidedCall,
  type Decision,
  type DenyOptions,
} from "./approvals.js";
import { readBlob } from "./blob.js";
import {
  AbortError,
  ClientError,
  raceAbort,
  toolError,
  unwrap,
  wrapBusError,
  type ToolError,
} from "./errors.js";
import { mayCall, parsePersonality } from "./personality.js";
import {
  DEFAULT_PERSONALITY,
  DEFAULT_POOL,
  DEFAULT_PREFIX,
  DEFAULT_TURN_BUDGET_CHARS,
  HEADER_PROTOCOL,
  Names,
  PROGRESS_KIND_APPROVAL_REQUIRED,
  PROTOCOL_VERSION,
  RESULT_MISSING,
  checkToken,
  encodeCall,
  failure,
  newID,
  type ApprovalRequest,
  type Audience,
  type Call,
  type CatalogEntry,
  type Hold,
  type Progress,
  type Result,
} from "./protocol.js";
import { loadOTel, startSend } from "./trace.js";

/** Options of CapstanClient.connect. Only `servers` is required. */
export interface ClientOptions {
  /** NATS server URLs: an array, or one string with commas. */
  servers: string | string[];
  /**
   * A credentials file: a NATS credentials file (user JWT and NKey seed) or
   * an NKey user seed file such as the `embedded.creds` an embedded server
   * writes into its data dir (it refuses connections without it).
   */
  creds?: string;
  /**
   * A user name and password, as deploy/nats/auth.conf gives each tenant
   * (e.g. user "tenant-researcher"). Both or neither; not with creds.
   */
  user?: string;
  pass?: string;
  /** The subject prefix; default "capstan". */
  prefix?: string;
  /** Connection name shown by the server; default "capstan-client-ts". */
  name?: string;
  /**
   * The personality this client acts under: put into calls that name none,
   * and the token of the result, progress and cancel subjects it reads.
   * Default "default".
   */
  personality?: string;
  /**
   * Prefix of the connection's reply subjects instead of "_INBOX": a
   * tenant's NATS user may subscribe only to its own (deploy/nats/auth.conf),
   * e.g. "_INBOX_researcher".
   */
  inboxPrefix?: string;
  /** How long executeParallel waits for a call without timeout_ms; default 70 000 ms. */
  defaultWaitMs?: number;
  /**
   * The decider's name that approve, deny, approveOwn and denyOwn send when
   * they are given none: default the CAPSTAN_APPROVER_NAME environment
   * variable, else options.user, else "local" (approvals.md).
   */
  approverName?: string;
  /** Aborts the connection attempt and the first read of the catalog. */
  signal?: AbortSignal;
}

/** One LLM turn for executeParallel. Every field is optional. */
export interface Turn {
  /** batch_id of every call of the turn; default a new id. */
  batchID?: string;
  /** The turn's result budget, shared equally by its calls; default 80 000 characters. */
  budgetChars?: number;
  /**
   * Bound on the wait for results, in ms; default the longest timeout_ms of
   * the calls plus 10 s (defaultWaitMs for a call without one). Negative:
   * wait until every result arrives or the signal aborts.
   */
  waitMs?: number;
  /** Ends the wait: calls without a result then get the ResultMissing failure. */
  signal?: AbortSignal;
  /**
   * The model provider's tool-call id of a call, by Capstan call_id, when
   * they differ (see the envelope module): recorded as gen_ai.tool.call.id
   * on the call's producer span.
   */
  toolCallIDs?: Record<string, string>;
}

/** Options of the single-call waits. */
export interface WaitOptions {
  signal?: AbortSignal;
}

/** Options of approvalRequests(). */
export interface ApprovalRequestsOptions {
  /** Deliver the stored events (kept 1 h) before new ones; default only new ones. */
  fromStart?: boolean;
  /** Ends the iteration. */
  signal?: AbortSignal;
}

/** Options of progress(). */
export interface ProgressOptions {
  /** Only this audience ("internal", "user", "dashboard"); default every audience. */
  audience?: Audience;
  /** Only this batch; default every batch of the client's personality. */
  batchID?: string;
  /** Deliver the stored events (kept 1 h) before new ones; default only new ones. */
  fromStart?: boolean;
  /** Ends the iteration. */
  signal?: AbortSignal;
}

/** Milliseconds added to a call's timeout_ms to get how long to wait for its result. */
export const WAIT_SLACK_MS = 10_000;
/** Default wait for a call without timeout_ms: the workers' 60 s default plus 10 s. */
export const DEFAULT_WAIT_MS = 70_000;
const PUBLISH_PARALLELISM = 64;
/** A reading consumer goes away on its own this long (ns) after its last use. */
const TAIL_INACTIVE_NS = 60_000 * 1_000_000;

/** Shared by the views of one client (withPersonality). */
class Core {
  catalog = new Map<string, CatalogEntry>();
  stopWatch: () => void = () => {};
  closed = false;
  constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly names: Names,
    readonly defaultWaitMs: number,
    readonly approverName: string,
  ) {}
}

/**
 * CapstanClient publishes calls and reads results under one personality.
 * Create it with `CapstanClient.connect` and release it with `close`. It
 * does not create Capstan's streams and buckets: a worker creates them at
 * start (a tenant's NATS user may not create them anyway).
 */
export class CapstanClient {
  readonly #core: Core;
  /** The personality this client (or view) acts under. */
  readonly personality: string;

  private constructor(core: Core, personality: string) {
    this.#core = core;
    this.personality = personality;
  }

  /**
   * Connects, and reads the tool catalog (a KV watch that keeps it current
   * until close). Option errors name the option; a refused connection is a
   * ClientError.
   */
  static async connect(opts: ClientOptions): Promise<CapstanClient> {
    const problems: string[] = [];
    const servers = (Array.isArray(opts.servers) ? opts.servers : String(opts.servers ?? "").split(","))
      .map((s) => s.trim()).filter((s) => s !== "");
    if (servers.length === 0) problems.push("options.servers must be set");
    const prefix = opts.prefix || DEFAULT_PREFIX;
    const personality = opts.personality || DEFAULT_PERSONALITY;
    for (const [what, v] of [["options.prefix", prefix], ["options.personality", personality]] as const) {
      const bad = checkToken(what, v);
      if (bad) problems.push(bad);
    }
    if (opts.inboxPrefix !== undefined) {
      const bad = checkToken("options.inboxPrefix", opts.inboxPrefix);
      if (bad) problems.push(bad);
    }
    if ((opts.user === undefined) !== (opts.pass === undefined)) {
      problems.push("options.user and options.pass go together: set both or neither");
    }
    if (opts.user !== undefined && opts.creds) {
      problems.push("options.user and options.creds are two ways to authenticate: set one");
    }
    if (opts.defaultWaitMs !== undefined && !(opts.defaultWaitMs >= 0)) {
      problems.push(`options.defaultWaitMs must not be negative, got ${opts.defaultWaitMs}`);
    }
    if (opts.approverName !== undefined && opts.approverName === "") {
      problems.push("options.approverName must not be empty when set");
    }
    if (problems.length > 0) throw new TypeError("capstan: " + problems.join("; "));
    opts.signal?.throwIfAborted();

    const authenticator = opts.creds ? await credsFile(opts.creds) : undefined;
    let nc: NatsConnection;
    try {
      nc = await connect({
        servers,
        name: opts.name ?? "capstan-client-ts",
        ...(authenticator ? { authenticator } : {}),
        ...(opts.user !== undefined ? { user: opts.user, pass: opts.pass } : {}),
        ...(opts.inboxPrefix ? { inboxPrefix: opts.inboxPrefix } : {}),
        maxReconnectAttempts: -1,
        reconnectTimeWait: 500,
        timeout: 5000,
      });
    } catch (e) {
      const msg = (e as Error).message ?? String(e);
      if (/authorization|authentication/i.test(msg)) {
        throw new ClientError(`capstan: connect: the server refused the credentials: ${msg}`, { cause: e });
      }
      throw new ClientError(`capstan: connect: ${msg}`, { cause: e });
    }
    await loadOTel();
    try {
      const core = new Core(nc, jetstream(nc), await jetstreamManager(nc, { checkAPI: false }), new Names(prefix),
        opts.defaultWaitMs || DEFAULT_WAIT_MS, opts.approverName || process.env.CAPSTAN_APPROVER_NAME || opts.user || "local");
      const c = new CapstanClient(core, personality);
      await c.#watchCatalog(opts.signal);
      return c;
    } catch (e) {
      await nc.close();
      throw e;
    }
  }

  /**
   * Returns a view of this client acting under personality id: it shares the
   * connection and the catalog (close on any view closes them for all).
   */
  withPersonality(id: string): CapstanClient {
    const bad = checkToken("personality", id);
    if (bad) throw new TypeError("capstan: " + bad);
    return new CapstanClient(this.#core, id);
  }

  /** The subject prefix in use. */
  get prefix(): string { return this.#core.names.prefix; }

  /** The NATS connection, for what this client does not cover. */
  get connection(): NatsConnection { return this.#core.nc; }

  /** Stops the catalog watch and closes the connection. Idempotent. */
  async close(): Promise<void> {
    const core = this.#core;
    if (core.closed) return;
    core.closed = true;
    core.stopWatch();
    await core.nc.close();
  }

  // --- catalog -------------------------------------------------------------

  async #watchCatalog(signal?: AbortSignal): Promise<void> {
    const core = this.#core;
    const kv = await new Kvm(core.js).open(core.names.toolsBucket);
    const watch = await kv.watch();
    core.stopWatch = () => watch.stop();
    // The watch's consumer knows how many entries it holds at its start: the
    // initial read is done once that many have been applied.
    let initial = 0;
    try {
      const info = await (watch as unknown as { _data?: { info(cached: boolean): Promise<{ num_pending: number }> } })
        ._data?.info(true);
      initial = info?.num_pending ?? 0;
    } catch {
      initial = 0;
    }
    let ready!: () => void;
    const done = new Promise<void>((resolve) => { ready = resolve; });
    if (initial === 0) ready();
    void (async () => {
      let n = 0;
      for await (const e of watch) {
        this.#applyCatalog(e);
        if (++n >= initial) ready();
      }
      ready();
    })();
    await raceAbort(done, signal, "capstan: read the tool catalog");
  }

  #applyCatalog(e: KvWatchEntry): void {
    const catalog = this.#core.catalog;
    if (e.operation !== "PUT") {
      catalog.delete(e.key);
      return;
    }
    try {
      const entry = e.json<CatalogEntry>();
      if (entry === null || typeof entry !== "object") throw new TypeError("not an object");
      entry.name ||= e.key;
      catalog.set(e.key, entry);
    } catch {
      catalog.delete(e.key); // one worker's garbage must not break the client
    }
  }

  /**
   * The tool catalog sorted by name. With `personality`, only the tools that
   * personality's LLM may call: those that pass the toolset, MCP-server,
   * plugin and permission gates and whose declared hosts and paths lie inside
   * the personality (like the Go client's ToolsFor; see personality.ts for
   * what differs).
   */
  async tools(opts: { personality?: string; signal?: AbortSignal } = {}): Promise<CatalogEntry[]> {
    const all = [...this.#core.catalog.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    if (opts.personality === undefined) return all;
    const doc = await this.personalityDocument(opts.personality, opts);
    const p = parsePersonality(doc);
    return all.filter((e) => mayCall(e, p));
  }

  /**
   * The stored document of a personality, read with a direct get naming its
   * key (what a tenant's NATS user may read of its own personality).
   * Throws UnknownPersonalityError when there is none.
   */
  async personalityDocument(id: string, opts: WaitOptions = {}): Promise<string> {
    const core = this.#core;
    if (checkToken("personality", id)) throw new UnknownPersonalityError(id);
    const bucket = core.names.personalitiesBucket;
    const m = await raceAbort(
      core.jsm.direct.getMessage("KV_" + bucket, { last_by_subj: `$KV.${bucket}.${id}` }),
      opts.signal, "capstan: read personality " + id,
    ).catch((e) => {
      if (e instanceof AbortError) throw e;
      throw wrapBusError(`capstan: read personality ${id}`, e);
    });
    const op = m?.header?.get("KV-Operation");
    if (!m || op === "DEL" || op === "PURGE") throw new UnknownPersonalityError(id);
    return new TextDecoder().decode(m.data);
  }

  /** The pool of a tool, or undefined when the tool must be refused as unknown. */
  #route(tool: string): string | undefined {
    const catalog = this.#core.catalog;
    const e = catalog.get(tool);
    if (e) return e.pool || DEFAULT_POOL;
    for (const entry of catalog.values()) {
      if ((entry.pool || DEFAULT_POOL) === DEFAULT_POOL) return undefined;
    }
    return DEFAULT_POOL;
  }

  // --- submit --------------------------------------------------------------

  /**
   * Checks, fills and routes a call: returns what to publish, or the
   * refusal (an input_invalid or not_available result). Fills call_id,
   * args and personality_id in place, as the Go client does.
   */
  #prepare(call: Call): { subject: string; body: Uint8Array } | { refused: Result } {
    call.call_id ||= newID();
    call.args ??= {};
    call.personality_id ||= this.personality;
    const enc = encodeCall(call);
    if (!enc.ok) return { refused: failure(call, "input_invalid", enc.error) };
    const pool = this.#route(call.tool);
    if (pool === undefined) return { refused: failure(call, "not_available", "Unknown tool: " + call.tool) };
    const bad = checkToken("pool", pool);
    if (bad) {
      return { refused: failure(call, "execution_failed", `capstan: tool catalog routes ${call.tool} to an invalid pool: ${bad}`) };
    }
    return { subject: this.#core.names.callSubject(pool, call.personality_id, call.tool), body: enc.body };
  }

  /**
   * Publishes one call and resolves once JetStream has stored it; it does
   * not wait for the result (see result). It fills an empty call_id with a
   * new id and missing args with {}, so the caller can await the call. A
   * call is checked first exactly as a worker decodes it; a bad call throws
   * InputInvalidError, an unknown tool (when the catalog has tools of the
   * default pool) NotAvailableError, both with `refused` true. Submitting a
   * call_id again within the de-duplication window (15 min) is a no-op.
   * Resolves to `{callID, duplicate}`.
   */
  async submit(call: Call, opts: { toolCallID?: string } = {}): Promise<{ callID: string; duplicate: boolean }> {
    this.#open();
    const out = this.#prepare(call);
    if ("refused" in out) throw toolError(out.refused, true) as ToolError;
    const duplicate = await this.#publish(call, out.subject, out.body, opts.toolCallID);
    return { callID: call.call_id!, duplicate };
  }

  async #publish(call: Call, subject: string, body: Uint8Array, toolCallID?: string): Promise<boolean> {
    const span = startSend({
      subject, callID: call.call_id!, toolCallID: toolCallID || call.call_id!, tool: call.tool,
      batchID: call.batch_id || call.call_id!, bodySize: body.length,
    });
    const h = natsHeaders();
    h.set(HEADER_PROTOCOL, PROTOCOL_VERSION);
    for (const [k, v] of Object.entries(span.headers)) h.set(k, v);
    try {
      const ack = await this.#core.js.publish(subject, body, { msgID: call.call_id!, headers: h });
      span.end(undefined, ack.duplicate);
      return ack.duplicate;
    } catch (e) {
      span.end(e);
      throw wrapBusError(`capstan: submit ${call.call_id}`, e);
    }
  }

  // --- results -------------------------------------------------------------

  /**
   * Waits for the result of call callID (in batch `batchID`, default the
   * call's own id) and returns it; a result stored before the wait started
   * is found too. A failed result is returned, not thrown (see unwrap and
   * run). Throws AbortError when the signal aborts first.
   */
  async result(callID: string, opts: WaitOptions & { batchID?: string } = {}): Promise<Result> {
    this.#open();
    const bad = checkToken("call_id", callID);
    if (bad) throw new TypeError("capstan: result: " + bad);
    const subject = this.#core.names.resultSubject(this.personality, opts.batchID || callID, callID);
    const tail = await this.#tail(this.#core.names.resultsStream, subject, DeliverPolicy.All, opts.signal);
    try {
      const it = tail.messages[Symbol.asyncIterator]();
      const next = await raceAbort(it.next(), opts.signal, `capstan: result of ${callID}`);
      if (next.done) throw new ClientError(`capstan: result of ${callID}: the consumer stopped`);
      return decodeResult(next.value.data);
    } finally {
      tail.stop();
    }
  }

  /**
   * The stored result of call callID of this client's personality, in any
   * batch, or undefined when there is none (not finished, never submitted,
   * another personality's call, or expired).
   */
  async lookup(callID: string, opts: WaitOptions = {}): Promise<Result | undefined> {
    this.#open();
    return this.#lookup(this.personality, callID, opts.signal);
  }

  async #lookup(personality: string, callID: string, signal?: AbortSignal): Promise<Result | undefined> {
    const core = this.#core;
    const filter = core.names.callResultFilter(personality, callID);
    const m = await raceAbort(core.jsm.direct.getMessage(core.names.resultsStream, { last_by_subj: filter }), signal,
      `capstan: result of ${callID}`).catch((e) => {
      if (e instanceof AbortError) throw e;
      throw wrapBusError(`capstan: result of ${callID}`, e);
    });
    return m ? decodeResult(m.data) : undefined;
  }

  /**
   * Submits one call, waits for its result and returns its value; a failed
   * result throws its ToolError subclass (a refused call too). The wait
   * lasts until the signal aborts (AbortError).
   */
  async run(call: Call, opts: WaitOptions = {}): Promise<string> {
    await this.submit(call);
    return unwrap(await this.result(call.call_id!, { batchID: call.batch_id, ...opts }));
  }

  // --- blobs ---------------------------------------------------------------

  /**
   * The full output that result refers to (`result.blob`), stored by the
   * worker because the result message carries only a cut of it, as bytes:
   * resolves only once their size and SHA-256 digest match the reference
   * (UTF-8 text for a value or an error message, JSON for a structured
   * payload: see `blob.content_type` and `blob.part`). Rejects with
   * NoBlobError when the result has no reference, BlobNotFoundError when
   * the blob is no longer stored, BlobCorruptError when the bytes do not
   * match, AbortError when the signal aborts first. The blob is read from
   * its chunk subject, which a tenant's NATS user may read for its own
   * personality only (deploy/nats/auth.conf), as the Go client's Blob reads
   * it.
   */
  async blob(result: Pick<Result, "call_id" | "blob">, opts: WaitOptions = {}): Promise<Uint8Array> {
    const parts: Uint8Array[] = [];
    for await (const chunk of this.blobChunks(result, opts)) parts.push(chunk);
    return Buffer.concat(parts);
  }

  /**
   * The same bytes as `blob`, as an async iterator of chunks (at most
   * 128 KiB each) for outputs one would rather not hold whole. The chunks
   * are passed on as they arrive; the step that would end the iteration
   * first checks the size and the digest and throws BlobCorruptError
   * instead when either differs, so a loop that runs to its end never
   * accepts corrupt data without an error. Breaking out of the loop stops
   * the read.
   */
  async *blobChunks(result: Pick<Result, "call_id" | "blob">, opts: WaitOptions = {}):
    AsyncGenerator<Uint8Array, void, undefined> {
    this.#open();
    yield* readBlob(this.#core, result, opts.signal);
  }

  /**
   * Asks the workers to cancel call callID of this client's personality: a
   * running call has its context cancelled, a call not yet started will not
   * start; its result is execution_failed / "cancelled: <reason>"
   * ("cancelled: by request" without a reason). Resolves once the server has
   * received the request.
   */
  async cancel(callID: string, reason = "", opts: WaitOptions = {}): Promise<void> {
    this.#open();
    const subject = this.#core.names.cancelSubject(this.personality, callID);
    const h = natsHeaders();
    h.set(HEADER_PROTOCOL, PROTOCOL_VERSION);
    this.#core.nc.publish(subject, reason ? JSON.stringify({ reason }) : new Uint8Array(), { headers: h });
    await raceAbort(this.#core.nc.flush(), opts.signal, `capstan: cancel ${callID}`);
  }

  /**
   * Progress events of this client's personality as an async iterator, in
   * publication order, filtered by audience and batch. Because the audience
   * is a subject token, a reader of one audience never receives another's
   * events. Events that are not valid JSON are skipped. The iteration ends
   * when the signal aborts or the loop breaks.
   */
  async *progress(opts: ProgressOptions = {}): AsyncGenerator<Progress, void, undefined> {
    this.#open();
    const filter = this.#core.names.progressTail(opts.audience, this.personality, opts.batchID);
    const tail = await this.#tail(this.#core.names.progressStream, filter,
      opts.fromStart ? DeliverPolicy.All : DeliverPolicy.New, opts.signal);
    const onAbort = () => tail.stop();
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const m of tail.messages) {
        let p: Progress;
        try {
          p = m.json<Progress>();
        } catch {
          continue;
        }
        yield p;
      }
    } finally {
      opts.signal?.removeEventListener("abort", onAbort);
      tail.stop();
    }
  }

  // --- approvals -----------------------------------------------------------

  /**
   * The calls held for a person's approval (pending only: a decided call
   * leaves the list), of one personality or of every personality when none
   * is given, oldest first. It reads the approvals bucket
   * (`<prefix>_approvals`, keys `hold.<personality>.<call>`): an approver's
   * NATS user may, a tenant's may not.
   */
  async holds(personality?: string, opts: WaitOptions = {}): Promise<Hold[]> {
    this.#open();
    return listHolds(this.#core, personality, opts.signal);
  }

  /**
   * The stored decisions (approved, denied, expired, cancelled, deadline)
   * of one personality or of all, newest first: the approvals history (kept
   * 8 days). Read as holds reads.
   */
  async decisions(personality?: string, opts: WaitOptions = {}): Promise<DecidedCall[]> {
    this.#open();
    return listDecisions(this.#core, personality, opts.signal);
  }

  /** The held call callID, of whichever personality, or undefined when it is not held. */
  async findHold(callID: string, opts: WaitOptions = {}): Promise<Hold | undefined> {
    this.#open();
    return findHold(this.#core, callID, opts.signal);
  }

  /**
   * Approves the held call callID, bound to the hash of its arguments
   * (`args_sha256` of its Hold or ApprovalRequest): the call runs once, with
   * exactly those arguments. The request goes to
   * `<p>.approval.decide.<personality>.<call>`, the personality read from
   * the hold. Resolves to the stored Decision; a refusal ("approval does not
   * match the call's arguments", "already approved by alice", "no held call
   * <call_id>", "<by> is not an approver of personality <p>
   * (approval.approvers)") rejects with DecisionRefusedError, no worker
   * answering with NoWorkerError.
   */
  async approve(callID: string, argsSHA256: string, opts: ApproveOptions = {}): Promise<Decision> {
    this.#open();
    return decide(this.#core, callID, false, "",
      approvalRequest(true, argsSHA256, opts.reason ?? "", opts.by || this.#core.approverName), opts);
  }

  /**
   * Denies the held call callID with a reason (required, at most 500
   * characters): its result is not_available, `APPROVAL_DENIED: <reason>`.
   * Refusals and errors as in approve.
   */
  async deny(callID: string, reason: string, opts: DenyOptions = {}): Promise<Decision> {
    this.#open();
    return decide(this.#core, callID, false, "", approvalRequest(false, "", reason, opts.by || this.#core.approverName), opts);
  }

  /**
   * approve as the call's own caller: a held call of this client's
   * personality, on `<p>.approval.self.<personality>.<call>`. The workers
   * accept it only when the personality sets `approval.self: true`; it is
   * the one decision request a tenant's NATS user may send. It reads no
   * bucket.
   */
  async approveOwn(callID: string, argsSHA256: string, opts: ApproveOptions = {}): Promise<Decision> {
    this.#open();
    return decide(this.#core, callID, true, this.personality,
      approvalRequest(true, argsSHA256, opts.reason ?? "", opts.by || this.#core.approverName), opts);
  }

  /** deny as the call's own caller: see approveOwn. */
  async denyOwn(callID: string, reason: string, opts: DenyOptions = {}): Promise<Decision> {
    this.#open();
    return decide(this.#core, callID, true, this.personality,
      approvalRequest(false, "", reason, opts.by || this.#core.approverName), opts);
  }

  /**
   * The approval of every approval_required progress event of this
   * client's personality (audience user) as an async iterator: one per
   * call held. An event says a call was held; whether it still is, holds
   * and findHold say. Ends as progress ends (signal, break).
   */
  async *approvalRequests(opts: ApprovalRequestsOptions = {}): AsyncGenerator<ApprovalRequest, void, undefined> {
    for await (const p of this.progress({ audience: "user", fromStart: opts.fromStart, signal: opts.signal })) {
      if (p.kind === PROGRESS_KIND_APPROVAL_REQUIRED && p.approval) yield p.approval;
    }
  }

  /**
   * Runs the calls of one turn concurrently and returns their results in
   * input order. Every call gets batch_id = turn.batchID and, unless it sets
   * its own, result_budget_chars = floor(budgetChars / calls.length) (at
   * least 1; refused calls count too). It never fails as a whole: a refused
   * call gets its refusal, a call that could not be published gets
   * execution_failed with the error, and a call with no result when the
   * wait ends (or the signal aborts) gets execution_failed / RESULT_MISSING.
   * The caller's call objects are not changed.
   */
  async executeParallel(calls: Call[], turn: Turn = {}): Promise<Result[]> {
    if (calls.length === 0) return [];
    const batchID = turn.batchID || newID();
    const budget = turn.budgetChars && turn.budgetChars > 0 ? turn.budgetChars : DEFAULT_TURN_BUDGET_CHARS;
    const share = Math.max(Math.floor(budget / calls.length), 1);
    const prepared = calls.map((c) => ({ ...c, batch_id: batchID, result_budget_chars: c.result_budget_chars || share }));
    return this.collect(prepared, turn);
  }

  /**
   * Publishes calls (at most 64 publishes in flight) and returns their
   * results in input order; calls may belong to different batches. A
   * caller-supplied call_id that already has a stored result is not run
   * again: that result is returned. The wait is bounded as in
   * executeParallel; it never fails as a whole. `onResult` is called once per
   * call as its result becomes known.
   */
  async collect(calls: Call[], turn: Omit<Turn, "batchID" | "budgetChars"> & {
    onResult?: (index: number, r: Result) => void;
  } = {}): Promise<Result[]> {
    this.#open();
    const n = calls.length;
    const results: Result[] = new Array(n);
    const done: boolean[] = new Array(n).fill(false);
    let remaining = 0;
    let finish!: () => void;
    const allDone = new Promise<void>((resolve) => { finish = resolve; });
    const set = (i: number, r: Result) => {
      if (done[i]) return;
      done[i] = true;
      results[i] = r;
      turn.onResult?.(i, r);
      if (--remaining === 0) finish();
    };
    calls = calls.map((c) => ({ ...c }));
    const outs: Array<{ subject: string; body: Uint8Array } | undefined> = new Array(n);
    const waiting = new Map<string, number[]>();
    const filters = new Set<string>();
    const supplied = calls.map((c) => Boolean(c.call_id));
    const toPublish: number[] = [];
    remaining = n;
    for (let i = 0; i < n; i++) {
      const call = calls[i]!;
      const out = this.#prepare(call);
      if ("refused" in out) {
        set(i, out.refused);
        continue;
      }
      outs[i] = out;
      waiting.set(call.call_id!, [...(waiting.get(call.call_id!) ?? []), i]);
      filters.add(this.#core.names.batchResultsFilter(call.personality_id!, call.batch_id || call.call_id!));
      toPublish.push(i);
    }
    if (toPublish.length === 0) return results;

    let waitMs = turn.waitMs ?? 0;
    if (waitMs === 0) {
      waitMs = 0;
      for (const c of calls) {
        waitMs = Math.max(waitMs, c.timeout_ms && c.timeout_ms > 0 ? c.timeout_ms + WAIT_SLACK_MS : this.#core.defaultWaitMs);
      }
    }
    const stop = new AbortController();
    const timer = waitMs > 0 ? setTimeout(() => stop.abort(), waitMs) : undefined;
    const onAbort = () => stop.abort();
    turn.signal?.addEventListener("abort", onAbort, { once: true });
    if (turn.signal?.aborted) stop.abort();
    const tails: Array<{ stop(): void }> = [];
    const follow = async (filter: string) => {
      const tail = await this.#tail(this.#core.names.resultsStream, filter, DeliverPolicy.All, stop.signal);
      tails.push(tail);
      void (async () => {
        try {
          for await (const m of tail.messages) {
            const callID = m.subject.slice(m.subject.lastIndexOf(".") + 1);
            let r: Result | undefined;
            let err: unknown;
            try {
              r = decodeResult(m.data);
            } catch (e) {
              err = e;
            }
            for (const i of waiting.get(callID) ?? []) {
              set(i, r ?? failure(calls[i]!, "execution_failed", (err as Error).message));
            }
          }
        } catch {
          // the consumer ended: what has no result gets RESULT_MISSING below
        }
      })();
    };
    try {
      try {
        for (const f of filters) await follow(f);
      } catch (e) {
        for (const i of toPublish) set(i, failure(calls[i]!, "execution_failed", (e as Error).message));
        return results;
      }
      let next = 0;
      const publisher = async () => {
        while (next < toPublish.length && !stop.signal.aborted) {
          const i = toPublish[next++]!;
          const call = calls[i]!;
          if (done[i]) continue;
          if (supplied[i]) {
            // call_id is the idempotency key: a call answered before is not run again.
            const r = await this.#lookup(call.personality_id!, call.call_id!, stop.signal).catch(() => undefined);
            if (r) {
              for (const j of waiting.get(call.call_id!) ?? []) set(j, r);
              continue;
            }
          }
          try {
            const dup = await this.#publish(call, outs[i]!.subject, outs[i]!.body, turn.toolCallIDs?.[call.call_id!]);
            if (dup) {
              // Submitted before, maybe in another batch: follow that result.
              await follow(this.#core.names.callResultFilter(call.personality_id!, call.call_id!));
            }
          } catch (e) {
            if (!stop.signal.aborted) set(i, failure(call, "execution_failed", (e as Error).message));
          }
        }
      };
      const publishers = Array.from({ length: Math.min(PUBLISH_PARALLELISM, toPublish.length) }, publisher);
      const aborted = new Promise<void>((resolve) => {
        if (stop.signal.aborted) resolve();
        stop.signal.addEventListener("abort", () => resolve(), { once: true });
      });
      await Promise.race([allDone, aborted]);
      stop.abort();
      await Promise.allSettled(publishers);
    } finally {
      if (timer) clearTimeout(timer);
      turn.signal?.removeEventListener("abort", onAbort);
      for (const t of tails) t.stop();
    }
    for (const i of toPublish) set(i, failure(calls[i]!, "execution_failed", RESULT_MISSING));
    return results;
  }

  /**
   * Reads stream through an ephemeral consumer with ONE filter from the
   * given start. Everything it does is something a tenant's NATS user may
   * do (deploy/nats/auth.conf): the create request's subject carries the
   * filter ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>) so the
   * server's permissions can bind it, and neither the create nor the reads
   * ask for stream or consumer information (an ordered consumer would read
   * the stream's, which lists every tenant's subjects). The consumer lives
   * in memory, acknowledges nothing, and is deleted by stop() or by the
   * server a minute after its last use. stop() ends the iteration.
   */
  async #tail(stream: string, filter: string, deliver: DeliverPolicy, signal?: AbortSignal):
    Promise<{ messages: ConsumerMessages; stop(): void }> {
    const jsm = this.#core.jsm;
    const name = newID();
    const what = `capstan: read ${stream} ${filter}`;
    let created = false;
    let messages: ConsumerMessages;
    try {
      const info = await raceAbort(jsm.consumers.add(stream, {
        name,
        filter_subject: filter,
        deliver_policy: deliver,
        ack_policy: AckPolicy.None,
        mem_storage: true,
        num_replicas: 1,
        inactive_threshold: TAIL_INACTIVE_NS,
      }), signal, what);
      created = true;
      messages = await this.#core.js.consumers.getConsumerFromInfo(info).consume({ bind: true });
    } catch (e) {
      if (created) jsm.consumers.delete(stream, name).catch(() => {});
      if (e instanceof AbortError) throw e;
      throw wrapBusError(what, e);
    }
    let stopped = false;
    return {
      messages,
      stop: () => {
        if (stopped) return;
        stopped = true;
        messages.stop();
        jsm.consumers.delete(stream, name).catch(() => {});
      },
    };
  }

  #open(): void {
    if (this.#core.closed) throw new ClientError("capstan: the client is closed");
  }
}

/** No personality has the id. */
export class UnknownPersonalityError extends ClientError {
  override name = "UnknownPersonalityError";
  readonly personality: string;
  constructor(id: string) {
    super("Unknown personality: " + id);
    this.personality = id;
  }
}

function decodeResult(data: Uint8Array): Result {
  try {
    return JSON.parse(new TextDecoder().decode(data)) as Result;
  } catch (e) {
    throw new ClientError(`capstan: result is not valid JSON: ${(e as Error).message}`, { cause: e });
  }
}

/** Reads a credentials file: a NATS creds file (JWT + seed) or an NKey user seed file. */
async function credsFile(path: string): Promise<Authenticator> {
  let data: Uint8Array;
  try {
    data = await readFile(path);
  } catch (e) {
    throw new ClientError(`capstan: credentials file ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const text = new TextDecoder().decode(data);
  if (text.includes("BEGIN NATS USER JWT")) return credsAuthenticator(data);
  const seed = /^\s*(SU[A-Z2-7]+)\s*$/m.exec(text)?.[1];
  if (seed) return nkeyAuthenticator(new TextEncoder().encode(seed));
  throw new ClientError(`capstan: credentials file ${path} is neither a NATS credentials file (a user JWT and its NKey seed) ` +
    "nor an NKey user seed file (a line starting with SU, as in embedded.creds)");
}
