// Calls held for a person's approval (approvals.md), as the Go client's
// client/approvals.go reads and decides them: the held calls and the
// decisions are the values of the approvals bucket (keys
// hold.<personality>.<call> and decision.<personality>.<call>), read here
// with one consumer per listing; a decision is a core NATS request on
// <p>.approval.decide.<personality>.<call> (an approver) or
// <p>.approval.self.<personality>.<call> (the caller's own session),
// answered by a worker with {ok, error | decision, by, at}.

import { RequestError, TimeoutError, type NatsConnection } from "@nats-io/transport-node";
import {
  DeliverPolicy,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import {
  AbortError,
  ClientError,
  DecisionRefusedError,
  NoWorkerError,
  raceAbort,
  wrapBusError,
} from "./errors.js";
import {
  APPROVAL_APPROVED,
  APPROVAL_DENIED,
  MAX_APPROVAL_REASON,
  checkToken,
  type ApprovalDecision,
  type Hold,
  type Names,
} from "./protocol.js";
import { addReader } from "./reader.js";

/** What the approvals functions need of the client. */
export interface ApprovalsBus {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  names: Names;
}

/** A decision the workers stored: the reply to approve, deny, approveOwn and denyOwn. */
export interface Decision {
  /** The held call decided. */
  callID: string;
  /** "approved" or "denied". */
  decision: ApprovalDecision | string;
  /** The decider's name, as sent. */
  by: string;
  /** When the decision was stored (RFC 3339). */
  at: string;
}

/** A held call and its decision, as the approvals history lists it. */
export interface DecidedCall {
  hold: Hold;
  /** approved, denied, expired, cancelled or deadline. */
  decision: ApprovalDecision | string;
  /** Who decided; absent for a decision nobody made (expired, deadline). */
  by?: string;
  /** When (RFC 3339). */
  at: string;
  /** A denial's or a cancellation's reason. */
  reason?: string;
}

/** Options of approve and approveOwn. */
export interface ApproveOptions {
  /** Why, for the audit record (at most 500 characters). */
  reason?: string;
  /**
   * The decider's name; default the client's approverName
   * (ClientOptions.approverName).
   */
  by?: string;
  /** How long to wait for a worker's reply; default 10 000 ms. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Options of deny and denyOwn. */
export type DenyOptions = Omit<ApproveOptions, "reason">;

/** How long a decision request waits for a worker's reply by default. */
export const DECIDE_TIMEOUT_MS = 10_000;

/** Most entries asked for in one pull of a listing. */
const FETCH_BATCH = 256;
/** How long one pull waits. */
const FETCH_WAIT_MS = 5000;

/** The decision request's body (the Go approval.Request). */
interface DecisionRequest {
  decision: string;
  args_sha256?: string;
  reason?: string;
  by: string;
}

/** The worker's reply (the Go approval.Reply). */
interface DecisionReply {
  ok?: boolean;
  error?: string;
  decision?: string;
  by?: string;
  at?: string;
}

/**
 * The calls held for approval (pending only), of one personality or of all
 * (undefined), oldest first. Only the listed fields are kept: the stored
 * record also holds the call's body, which is not for display.
 */
export async function listHolds(bus: ApprovalsBus, personality: string | undefined, signal?: AbortSignal):
  Promise<Hold[]> {
  const pattern = "hold." + (personality === undefined ? "*" : tokenOf("personality", personality)) + ".*";
  const holds: Hold[] = [];
  for (const { value } of await scan(bus, pattern, signal)) {
    const h = asHold(value);
    if (h) holds.push(h);
  }
  return holds.sort((a, b) => compareTimes(a.held_at, b.held_at));
}

/**
 * The stored decisions (approved, denied, expired, cancelled, deadline) of
 * one personality or of all (undefined), newest first: the approvals
 * history.
 */
export async function listDecisions(bus: ApprovalsBus, personality: string | undefined, signal?: AbortSignal):
  Promise<DecidedCall[]> {
  const pattern = "decision." + (personality === undefined ? "*" : tokenOf("personality", personality)) + ".*";
  const out: DecidedCall[] = [];
  for (const { value } of await scan(bus, pattern, signal)) {
    const d = asDecision(value);
    if (d) out.push(d);
  }
  return out.sort((a, b) => compareTimes(b.at, a.at));
}

/** The held call callID, of whichever personality, or undefined when it is not held. */
export async function findHold(bus: ApprovalsBus, callID: string, signal?: AbortSignal): Promise<Hold | undefined> {
  const holds = await listHoldsOfCall(bus, callID, signal);
  return holds[0];
}

async function listHoldsOfCall(bus: ApprovalsBus, callID: string, signal?: AbortSignal): Promise<Hold[]> {
  const pattern = "hold.*." + tokenOf("call_id", callID);
  const holds: Hold[] = [];
  for (const { value } of await scan(bus, pattern, signal)) {
    const h = asHold(value);
    if (h) holds.push(h);
  }
  return holds.sort((a, b) => compareTimes(a.held_at, b.held_at));
}

/**
 * Asks the workers to decide the held call callID. For an approver's
 * request (self false) the personality is the hold's, found in the bucket;
 * a call that is not held is refused here with the workers' message. For
 * the caller's own request (self true) it is `personality`.
 */
export async function decide(bus: ApprovalsBus, callID: string, self: boolean, personality: string,
  req: DecisionRequest, opts: { timeoutMs?: number; signal?: AbortSignal }): Promise<Decision> {
  const badID = checkToken("call_id", callID);
  if (badID) throw new TypeError("capstan: decide: " + badID);
  const problem = checkRequest(req);
  if (problem) throw new TypeError(`capstan: decide ${callID}: ${problem}`);
  const timeout = opts.timeoutMs ?? DECIDE_TIMEOUT_MS;
  if (!(timeout > 0)) throw new TypeError(`capstan: decide ${callID}: timeoutMs must be greater than 0, got ${timeout}`);
  const subject = self
    ? bus.names.approvalSelfSubject(personality, callID)
    : bus.names.approvalSubject(await holdPersonality(bus, callID, opts.signal), callID);
  const what = `capstan: decide ${callID}`;
  let data: Uint8Array;
  try {
    const m = await raceAbort(bus.nc.request(subject, JSON.stringify(req), { timeout }), opts.signal, what);
    data = m.data;
  } catch (e) {
    if (e instanceof AbortError) throw e;
    if (e instanceof RequestError && e.isNoResponders()) throw new NoWorkerError(callID, { cause: e });
    if (e instanceof TimeoutError) throw new ClientError(`${what}: no reply within ${timeout} ms`, { cause: e });
    throw wrapBusError(what, e);
  }
  let reply: DecisionReply;
  try {
    reply = JSON.parse(new TextDecoder().decode(data)) as DecisionReply;
    if (reply === null || typeof reply !== "object") throw new TypeError("not a JSON object");
  } catch (e) {
    throw new ClientError(`${what}: invalid reply: ${(e as Error).message}`, { cause: e });
  }
  if (reply.ok !== true) throw new DecisionRefusedError(callID, String(reply.error ?? ""));
  return { callID, decision: reply.decision ?? req.decision, by: reply.by ?? req.by, at: reply.at ?? "" };
}

/** The body of an approval (with the hash) or a denial; decide checks it as the workers do. */
export function approvalRequest(approve: boolean, argsSHA256: string, reason: string, by: string): DecisionRequest {
  const req: DecisionRequest = approve
    ? { decision: APPROVAL_APPROVED, args_sha256: argsSHA256, by }
    : { decision: APPROVAL_DENIED, by };
  if (reason !== "") req.reason = reason;
  return req;
}

/** What is wrong with a decision request (the Go approval.Request.Check), or undefined. */
function checkRequest(r: DecisionRequest): string | undefined {
  if (r.decision === APPROVAL_APPROVED) {
    if (typeof r.args_sha256 !== "string" || r.args_sha256 === "") return "args_sha256: is required to approve";
  } else if (r.decision === APPROVAL_DENIED) {
    if (typeof r.reason !== "string" || r.reason.trim() === "") return "reason: is required to deny";
  } else {
    return `decision: must be "approved" or "denied", not ${JSON.stringify(r.decision)}`;
  }
  const n = Array.from(r.reason ?? "").length;
  if (n > MAX_APPROVAL_REASON) return `reason: must be at most ${MAX_APPROVAL_REASON} characters (it has ${n})`;
  if (typeof r.by !== "string" || r.by === "") return "by: is required";
  return undefined;
}

/**
 * The personality of held call callID; a call that is not held is refused
 * naming its decision when it has one ("already approved by alice"), else
 * "no held call <call_id>": the workers' messages.
 */
async function holdPersonality(bus: ApprovalsBus, callID: string, signal?: AbortSignal): Promise<string> {
  const h = await findHold(bus, callID, signal);
  if (h) return h.personality_id;
  for (const { value } of await scan(bus, "decision.*." + callID, signal)) {
    const d = asDecision(value);
    if (d) throw new DecisionRefusedError(callID, d.by ? `already ${d.decision} by ${d.by}` : `already ${d.decision}`);
  }
  throw new DecisionRefusedError(callID, `no held call ${callID}`);
}

/**
 * The current values of the approvals bucket's keys matching pattern (NATS
 * wildcards over the key's tokens), read once with an ephemeral consumer
 * (deliver last per subject) up to the last stored entry; deleted keys are
 * left out.
 */
async function scan(bus: ApprovalsBus, pattern: string, signal?: AbortSignal):
  Promise<Array<{ key: string; value: unknown }>> {
  const bucket = bus.names.approvalsBucket;
  const stream = "KV_" + bucket;
  const prefix = `$KV.${bucket}.`;
  const filter = prefix + pattern;
  const what = `capstan: approvals: read ${filter}`;
  const info = await addReader(bus.jsm, stream, filter, DeliverPolicy.LastPerSubject, what, signal);
  const name = info.name;
  const out: Array<{ key: string; value: unknown }> = [];
  let current: ConsumerMessages | undefined;
  const onAbort = () => current?.stop();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    let remaining = info.num_pending;
    const consumer = bus.js.consumers.getConsumerFromInfo(info);
    while (remaining > 0) {
      try {
        current = await consumer.fetch({ max_messages: Math.min(remaining, FETCH_BATCH), expires: FETCH_WAIT_MS });
      } catch (e) {
        throw wrapBusError(what, e);
      }
      let got = 0;
      try {
        for await (const m of current) {
          got++;
          const op = m.headers?.get("KV-Operation");
          if (op !== "DEL" && op !== "PURGE") {
            try {
              out.push({ key: m.subject.slice(prefix.length), value: m.json<unknown>() });
            } catch {
              // a value that is not JSON is no record: left out, as the Go client leaves it out
            }
          }
          if (m.info.pending === 0) remaining = 0;
        }
      } catch (e) {
        throw wrapBusError(what, e);
      } finally {
        current.stop();
      }
      if (signal?.aborted) throw new AbortError(`${what}: aborted`, { cause: signal.reason });
      if (got === 0) break; // entries expired meanwhile
      remaining = Math.max(remaining - got, 0);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    bus.jsm.consumers.delete(stream, name).catch(() => {});
  }
  return out;
}

/** The listed fields of a hold record, or undefined when it is none. */
function asHold(v: unknown): Hold | undefined {
  if (v === null || typeof v !== "object") return undefined;
  const r = v as Record<string, unknown>;
  if (typeof r.call_id !== "string" || r.call_id === "") return undefined;
  const str = (k: string) => (typeof r[k] === "string" ? (r[k] as string) : "");
  return {
    call_id: r.call_id,
    batch_id: str("batch_id"),
    personality_id: str("personality_id"),
    tool: str("tool"),
    args_sha256: str("args_sha256"),
    held_at: str("held_at"),
    expires_at: str("expires_at"),
    summary: (r.summary ?? { args: null, grant: {} }) as Hold["summary"],
  };
}

/** A decision record as the history lists it, or undefined when it is none. */
function asDecision(v: unknown): DecidedCall | undefined {
  if (v === null || typeof v !== "object") return undefined;
  const r = v as Record<string, unknown>;
  const hold = asHold(r.hold);
  if (!hold || typeof r.decision !== "string") return undefined;
  const d: DecidedCall = { hold, decision: r.decision, at: typeof r.at === "string" ? r.at : "" };
  if (typeof r.by === "string" && r.by !== "") d.by = r.by;
  if (typeof r.reason === "string" && r.reason !== "") d.reason = r.reason;
  return d;
}

/** Orders RFC 3339 times, to the nanosecond. */
export function compareTimes(a: string, b: string): number {
  const ka = instant(a);
  const kb = instant(b);
  return ka[0] !== kb[0] ? ka[0] - kb[0] : ka[1] - kb[1];
}

function instant(s: string): [number, number] {
  const ms = Date.parse(s);
  const frac = /\d\d:\d\d:\d\d\.(\d+)/.exec(s)?.[1] ?? "";
  const subMs = Number((frac + "000000000").slice(3, 9));
  return [Number.isNaN(ms) ? 0 : ms, subMs];
}

function tokenOf(what: string, s: string): string {
  const bad = checkToken(what, s);
  if (bad) throw new TypeError("capstan: approvals: " + bad);
  return s;
}
