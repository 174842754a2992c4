// The wire contract of Capstan protocol version 2 (docs/protocol.md): message
// types, subject names and the call checks a worker applies. Pure: no I/O.

/** Value of the Capstan-Protocol header on every message this client sends. */
export const PROTOCOL_VERSION = "2";
/** Header names. traceparent and tracestate are lower-case exactly. */
export const HEADER_PROTOCOL = "Capstan-Protocol";
export const HEADER_TRACEPARENT = "traceparent";
export const HEADER_TRACESTATE = "tracestate";
/** Largest call body, in bytes (1 MiB). */
export const MAX_CALL_BYTES = 1 << 20;
/** Default subject prefix. */
export const DEFAULT_PREFIX = "capstan";
/** Pool of tools the catalog does not know. */
export const DEFAULT_POOL = "default";
/** Personality of a client that names none. */
export const DEFAULT_PERSONALITY = "default";
/** Turn budget of executeParallel when the turn sets none (tools.md, "Turn budget"). */
export const DEFAULT_TURN_BUDGET_CHARS = 80000;
/** Error of the execution_failed result of a call with no result when the wait ended. */
export const RESULT_MISSING = "Tool result missing: no result before deadline";

/** The four result codes. */
export type Code = "input_invalid" | "not_available" | "execution_failed" | "STALE_WRITE";
export const CODES: readonly Code[] = ["input_invalid", "not_available", "execution_failed", "STALE_WRITE"];

/** Who a progress event is for; also a subject token. */
export type Audience = "internal" | "user" | "dashboard";
export const AUDIENCES: readonly Audience[] = ["internal", "user", "dashboard"];

/**
 * A tool call (protocol.md, "Call message"), with the wire's field names.
 * Zero values (0, "", false) of optional fields mean "absent", as in the Go
 * client; `args` defaults to `{}` and `call_id` to a new id.
 */
export interface Call {
  call_id?: string;
  batch_id?: string;
  tool: string;
  args?: Record<string, unknown>;
  session_id: string;
  session_key?: string;
  platform?: string;
  working_dir?: string;
  personality_id?: string;
  agent_id?: string;
  team_id?: string;
  memory_scope_id?: string;
  current_turn?: number;
  message_count?: number;
  result_budget_chars?: number;
  dry_run?: boolean;
  /** RFC 3339 time string, or a Date. */
  deadline?: string | Date;
  timeout_ms?: number;
  exclude_tools?: string[];
  narrow_tools?: string[];
}

/** The one answer to a call (protocol.md, "Result message"). */
export interface Result {
  call_id: string;
  batch_id: string;
  tool: string;
  ok: boolean;
  value?: string;
  structured?: unknown;
  cost_usd?: number;
  code?: Code;
  error?: string;
  retry_after_ms?: number;
  truncated?: boolean;
  original_chars?: number;
  untrusted?: boolean;
  duration_ms: number;
  worker_id?: string;
  deliveries?: number;
  /**
   * True when the tool returned a structured payload that the result
   * message could not carry (protocol.md, "Result size"); `blob` holds it
   * when its `part` is "structured".
   */
  structured_omitted?: boolean;
  /**
   * The call's full output, stored in the blobs bucket because the message
   * carries only a cut of it (protocol.md, "Large outputs by reference");
   * read it with CapstanClient.blob. Absent when nothing was stored.
   */
  blob?: BlobRef;
}

/** What a blob holds in full (BlobRef.part). */
export type BlobPart = "value" | "error" | "structured";
export const BLOB_PART_VALUE = "value";
export const BLOB_PART_ERROR = "error";
export const BLOB_PART_STRUCTURED = "structured";
/** Content types of blobs. */
export const BLOB_TYPE_TEXT = "text/plain; charset=utf-8";
export const BLOB_TYPE_JSON = "application/json";

/**
 * A reference to a call's full output stored in the blobs bucket, a
 * JetStream Object Store bucket (protocol.md, "Large outputs by
 * reference"). Its chunks are the messages on `$O.<bucket>.C.<nuid>`
 * (blobChunkSubject), which a tenant's NATS user may read for its own
 * personality; its bytes must have `size` and `sha256`.
 */
export interface BlobRef {
  /** The Object Store bucket: <prefix>_blobs (stream OBJ_<prefix>_blobs). */
  bucket: string;
  /** The object's name: <personality>/<call_id>. */
  name: string;
  /** The object's chunk id, "<personality>.<token>". */
  nuid: string;
  /** The object's size in bytes. */
  size: number;
  /** The hex SHA-256 digest of the object's bytes. */
  sha256: string;
  /** "text/plain; charset=utf-8" for a value or an error message, "application/json" for a structured payload. */
  content_type: string;
  /** What the object holds in full: "value", "error" or "structured". */
  part: BlobPart | string;
}

/**
 * The subject of a blob's chunks, `$O.<bucket>.C.<nuid>`. Throws a
 * TypeError naming the field when the bucket is not a token or the nuid is
 * not `<personality>.<token>` (the Go client's BlobRef.ChunkSubject).
 */
export function blobChunkSubject(ref: Pick<BlobRef, "bucket" | "nuid">): string {
  const bad = checkToken("blob bucket", ref.bucket);
  if (bad) throw new TypeError(bad);
  const nuid = String(ref.nuid ?? "");
  const dot = nuid.indexOf(".");
  if (dot < 0 || !validToken(nuid.slice(0, dot)) || !validToken(nuid.slice(dot + 1))) {
    throw new TypeError(`blob nuid ${JSON.stringify(nuid)} must be <personality>.<token>`);
  }
  return `$O.${ref.bucket}.C.${nuid}`;
}

/** A progress event (protocol.md, "Progress event"). */
export interface Progress {
  type: "progress";
  call_id: string;
  batch_id: string;
  tool_name: string;
  message: string;
  percent?: number;
  audience: Audience;
  seq: number;
  time: string;
  /** Empty for a tool's own event; "approval_required" for the event of a call held for approval. */
  kind?: string;
  /** Set on an event of kind "approval_required": the held call. */
  approval?: ApprovalRequest;
}

/** Progress.kind of the event a worker publishes (audiences user and dashboard) when it holds a call. */
export const PROGRESS_KIND_APPROVAL_REQUIRED = "approval_required";

/**
 * What a person (or the clock) decided about a held call. A person decides
 * "approved" or "denied"; "expired" (no decision within approval.timeout),
 * "cancelled" and "deadline" end a hold without one.
 */
export type ApprovalDecision = "approved" | "denied" | "expired" | "cancelled" | "deadline";
export const APPROVAL_APPROVED = "approved";
export const APPROVAL_DENIED = "denied";
/** Longest reason of a decision, in characters (code points). */
export const MAX_APPROVAL_REASON = 500;

/**
 * The reach a held call gets once approved (approvals.md): hosts it may
 * connect to, path roots it may read and write, binaries it may start,
 * secret refs it may use, its key-value scopes. A list the tool does not
 * declare is empty.
 */
export interface ApprovalGrant {
  hosts: string[];
  read_paths: string[];
  write_paths: string[];
  binaries: string[];
  secrets: string[];
  kv: string[];
}

/**
 * What a person looks at before deciding: the validated arguments (secret
 * values the worker knows redacted) and the grant the call would get.
 */
export interface ApprovalSummary {
  args: Record<string, unknown> | null;
  grant: ApprovalGrant;
}

/**
 * The approval of a progress event of kind "approval_required": the held
 * call, the hash of its arguments a decision must name (argsSHA256 below),
 * when the hold expires (RFC 3339), and what the call would do.
 */
export interface ApprovalRequest {
  call_id: string;
  tool: string;
  args_sha256: string;
  expires_at: string;
  summary: ApprovalSummary;
}

/**
 * A call held for approval, as `dispatcher approvals list --json` prints it
 * and CapstanClient.holds lists it. Times are RFC 3339.
 */
export interface Hold {
  call_id: string;
  batch_id: string;
  personality_id: string;
  tool: string;
  args_sha256: string;
  held_at: string;
  expires_at: string;
  summary: ApprovalSummary;
}

/**
 * The approval of an audit record: who decided what about the call's
 * arguments, and when. It never holds argument values.
 */
export interface ApprovalStamp {
  decision: ApprovalDecision | string;
  by?: string;
  at: string;
  args_sha256: string;
  /** A denial's or a cancellation's reason. */
  reason?: string;
}

/** A tool's definition in the capstan_tools bucket (protocol.md, "Tool catalog"). */
export interface CatalogEntry {
  name: string;
  description: string;
  schema: Record<string, unknown>;
  toolset: string;
  capabilities: Record<string, unknown> | null;
  permissions: string[] | null;
  output_is_untrusted: boolean;
  always_include: boolean;
  max_result_chars: number;
  plugin?: string;
  pool: string;
  workers: string[] | null;
  updated: string;
}

const TOKEN_RE = /^[A-Za-z0-9_-]{1,128}$/;

/** Reports whether s may be used as a subject token: ^[A-Za-z0-9_-]{1,128}$. */
export function validToken(s: unknown): s is string {
  return typeof s === "string" && TOKEN_RE.test(s);
}

/** Returns an error message naming what when s is not a valid token, else undefined. */
export function checkToken(what: string, s: string): string | undefined {
  if (validToken(s)) return undefined;
  if (s === "") return `${what} must not be empty`;
  const chars = Array.from(String(s));
  const shown = chars.length <= 64 ? String(s) : chars.slice(0, 64).join("") + "...";
  return `${what} ${JSON.stringify(shown)} must match ^[A-Za-z0-9_-]{1,128}$`;
}

/** A failed result for call with the given code and message. */
export function failure(call: { call_id?: string; batch_id?: string; tool?: string }, code: Code, error: string): Result {
  const callID = call.call_id ?? "";
  return { call_id: callID, batch_id: call.batch_id || callID, tool: call.tool ?? "", ok: false, code, error, duration_ms: 0 };
}

/** Subject, stream and bucket names derived from one prefix. */
export class Names {
  readonly prefix: string;

  constructor(prefix: string = DEFAULT_PREFIX) {
    const bad = checkToken("subject prefix", prefix);
    if (bad) throw new TypeError(bad);
    this.prefix = prefix;
  }

  get resultsStream(): string { return this.prefix.toUpperCase() + "_RESULTS"; }
  get progressStream(): string { return this.prefix.toUpperCase() + "_PROGRESS"; }
  get callsStream(): string { return this.prefix.toUpperCase() + "_CALLS"; }
  get toolsBucket(): string { return this.prefix + "_tools"; }
  get personalitiesBucket(): string { return this.prefix + "_personalities"; }
  /** The Object Store bucket of large outputs; its stream is "OBJ_" + this. */
  get blobsBucket(): string { return this.prefix + "_blobs"; }
  /** The KV bucket of held calls and decisions; its stream is "KV_" + this. */
  get approvalsBucket(): string { return this.prefix + "_approvals"; }

  /** <p>.approval.decide.<personality>.<call>: an approver's decision request. */
  approvalSubject(personality: string, call: string): string {
    return `${this.prefix}.approval.decide.${tok("personality", personality)}.${tok("call_id", call)}`;
  }

  /**
   * <p>.approval.self.<personality>.<call>: a decision request of the
   * caller's own session (workers accept it only when the personality sets
   * approval.self).
   */
  approvalSelfSubject(personality: string, call: string): string {
    return `${this.prefix}.approval.self.${tok("personality", personality)}.${tok("call_id", call)}`;
  }

  /** <p>.call.<pool>.<personality>.<tool> */
  callSubject(pool: string, personality: string, tool: string): string {
    return `${this.prefix}.call.${tok("pool", pool)}.${tok("personality", personality)}.${tok("tool", tool)}`;
  }

  /** <p>.result.<personality>.<batch>.<call> */
  resultSubject(personality: string, batch: string, call: string): string {
    return `${this.prefix}.result.${tok("personality", personality)}.${tok("batch_id", batch)}.${tok("call_id", call)}`;
  }

  /** <p>.result.<personality>.<batch>.> */
  batchResultsFilter(personality: string, batch: string): string {
    return `${this.prefix}.result.${tok("personality", personality)}.${tok("batch_id", batch)}.>`;
  }

  /** <p>.result.<personality>.*.<call>: a call's result in any batch. */
  callResultFilter(personality: string, call: string): string {
    return `${this.prefix}.result.${tok("personality", personality)}.*.${tok("call_id", call)}`;
  }

  /** <p>.progress.<audience|*>.<personality>.<batch|*>.* */
  progressTail(audience: Audience | undefined, personality: string, batch: string | undefined): string {
    if (audience !== undefined && !AUDIENCES.includes(audience)) {
      throw new TypeError(`audience ${JSON.stringify(audience)} must be internal, user or dashboard`);
    }
    const b = batch ? tok("batch_id", batch) : "*";
    return `${this.prefix}.progress.${audience ?? "*"}.${tok("personality", personality)}.${b}.*`;
  }

  /** <p>.cancel.<personality>.<call> */
  cancelSubject(personality: string, call: string): string {
    return `${this.prefix}.cancel.${tok("personality", personality)}.${tok("call_id", call)}`;
  }
}

function tok(what: string, s: string): string {
  const bad = checkToken(what, s);
  if (bad) throw new TypeError(bad);
  return s;
}

/** The call encoded for the wire, or the input_invalid message a worker would give. */
export type Encoded = { ok: true; body: Uint8Array; wire: Record<string, unknown> } | { ok: false; error: string };

const encoder = new TextEncoder();

/**
 * Encodes call as the Go client does (zero values of optional fields are
 * left out) and checks it as a worker's decoder does, field by field in the
 * decoder's order, returning the first problem with the worker's message
 * (docs/protocol.md, "Decoder errors").
 */
export function encodeCall(call: Call): Encoded {
  if (call === null || typeof call !== "object") return { ok: false, error: "invalid call: body must be a JSON object" };
  const wire: Record<string, unknown> = {};
  const put = (k: string, v: unknown) => {
    if (v === undefined || v === null || v === "" || v === 0 || v === false) return;
    wire[k] = v;
  };
  // call_id, tool, args and session_id are always written, as the Go
  // client writes them (an empty one is then "must not be empty").
  wire.call_id = call.call_id ?? "";
  put("batch_id", call.batch_id);
  wire.tool = call.tool ?? "";
  wire.args = call.args === undefined ? {} : call.args;
  wire.session_id = call.session_id ?? "";
  put("session_key", call.session_key);
  put("platform", call.platform);
  put("working_dir", call.working_dir);
  put("personality_id", call.personality_id);
  put("agent_id", call.agent_id);
  put("team_id", call.team_id);
  put("memory_scope_id", call.memory_scope_id);
  put("current_turn", call.current_turn);
  put("message_count", call.message_count);
  put("result_budget_chars", call.result_budget_chars);
  put("dry_run", call.dry_run);
  put("deadline", call.deadline instanceof Date ? call.deadline.toISOString() : call.deadline);
  put("timeout_ms", call.timeout_ms);
  if (call.exclude_tools !== undefined && call.exclude_tools !== null) wire.exclude_tools = call.exclude_tools;
  if (call.narrow_tools !== undefined && call.narrow_tools !== null) wire.narrow_tools = call.narrow_tools;
  let text: string;
  try {
    text = JSON.stringify(wire);
  } catch (e) {
    return { ok: false, error: "invalid call: " + (e as Error).message };
  }
  const body = encoder.encode(text);
  const problem = checkCall(JSON.parse(text), body.length);
  if (problem) return { ok: false, error: problem };
  return { ok: true, body, wire };
}

const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

/** The worker decoder's checks on a parsed call body; the first problem, or undefined. */
export function checkCall(fields: Record<string, unknown>, size: number): string | undefined {
  if (size > MAX_CALL_BYTES) return `invalid call: call is ${size} bytes, more than the 1 MiB limit`;
  if (fields === null || typeof fields !== "object" || Array.isArray(fields)) return "invalid call: body must be a JSON object";
  const fail = (f: string, reason: string) => `invalid call: field ${JSON.stringify(f)} ${reason}`;
  const present = (f: string) => fields[f] !== undefined && fields[f] !== null;
  const str = (f: string, required: boolean): string | undefined => {
    if (!present(f)) return required ? fail(f, "is required") : undefined;
    if (typeof fields[f] !== "string") return fail(f, "must be a string");
    if (required && fields[f] === "") return fail(f, "must not be empty");
    return undefined;
  };
  const token = (f: string, required: boolean): string | undefined => {
    const bad = str(f, required);
    if (bad) return bad;
    if (present(f) && fields[f] !== "" && !validToken(fields[f])) return fail(f, "must match ^[A-Za-z0-9_-]{1,128}$");
    return undefined;
  };
  const integer = (f: string, min: number): string | undefined => {
    if (!present(f)) return undefined;
    const v = fields[f];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
      return fail(f, min === 0 ? "must be an integer of at least 0" : "must be an integer greater than 0");
    }
    return undefined;
  };
  const strings = (f: string): string | undefined => {
    if (!present(f)) return undefined;
    const v = fields[f];
    if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) return fail(f, "must be an array of strings");
    return undefined;
  };
  const first = (...checks: Array<() => string | undefined>) => {
    for (const c of checks) {
      const bad = c();
      if (bad) return bad;
    }
    return undefined;
  };
  return first(
    () => str("call_id", true),
    () => (validToken(fields.call_id) ? undefined : fail("call_id", "must match ^[A-Za-z0-9_-]{1,128}$")),
    () => token("batch_id", false),
    () => token("tool", true),
    () => {
      if (!present("args")) return fail("args", "is required");
      const a = fields.args;
      return typeof a === "object" && !Array.isArray(a) ? undefined : fail("args", "must be a JSON object");
    },
    () => str("session_id", true),
    () => str("session_key", false),
    () => str("platform", false),
    () => str("working_dir", false) ??
      (present("working_dir") && fields.working_dir !== "" && !String(fields.working_dir).startsWith("/")
        ? fail("working_dir", "must be an absolute path") : undefined),
    () => token("personality_id", false),
    () => str("agent_id", false),
    () => str("team_id", false),
    () => str("memory_scope_id", false),
    () => integer("current_turn", 0),
    () => integer("message_count", 0),
    () => integer("result_budget_chars", 1),
    () => (present("dry_run") && typeof fields.dry_run !== "boolean" ? fail("dry_run", "must be true or false") : undefined),
    () => {
      if (!present("deadline")) return undefined;
      if (typeof fields.deadline !== "string") return fail("deadline", "must be an RFC 3339 time string");
      return RFC3339.test(fields.deadline) && !Number.isNaN(Date.parse(fields.deadline))
        ? undefined : fail("deadline", "must be an RFC 3339 time such as 2026-01-02T15:04:05Z");
    },
    () => integer("timeout_ms", 1),
    () => strings("exclude_tools"),
    () => strings("narrow_tools"),
  );
}

/** Returns a random 26-character token (base32: A-Z, 2-7), valid as a call_id or batch_id. */
export function newID(): string {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  const bytes = new Uint8Array(26);
  crypto.getRandomValues(bytes);
  let s = "";
  for (const b of bytes) s += alphabet[b & 31];
  return s;
}
