// Typed errors: one class per failure kind of the protocol, each carrying the
// protocol's code and message, plus the client's own failures.

import type { BlobRef, Code, Result } from "./protocol.js";

/**
 * CapstanError is the base of every error this package throws. Protocol
 * failures (ToolError and its subclasses) carry the result's code and
 * message; ClientError reports the client's own trouble (connection,
 * permission, a closed client).
 */
export class CapstanError extends Error {
  override name = "CapstanError";
}

/**
 * ToolError is a failed result as an error: `code` and `message` are the
 * result's `code` and `error`, `result` the whole result. `refused` is true
 * when the client refused the call before publishing it (a worker never saw
 * it). Use `toolError(result)` to get the subclass for a result's code.
 */
export class ToolError extends CapstanError {
  override name = "ToolError";
  readonly code: Code;
  readonly result: Result;
  readonly refused: boolean;

  constructor(result: Result, refused = false) {
    super(result.error ?? "");
    this.code = result.code ?? "execution_failed";
    this.result = result;
    this.refused = refused;
  }

  /** The call this error answers. */
  get callID(): string { return this.result.call_id; }
}

/** input_invalid: the call or its arguments are malformed. */
export class InputInvalidError extends ToolError { override name = "InputInvalidError"; }
/** not_available: unknown tool, or the personality may not call it. */
export class NotAvailableError extends ToolError { override name = "NotAvailableError"; }
/** execution_failed: the tool ran (or was to run) and failed, timed out or was cancelled. */
export class ExecutionFailedError extends ToolError { override name = "ExecutionFailedError"; }
/** STALE_WRITE: a write refused because the file changed since it was read. */
export class StaleWriteError extends ToolError { override name = "StaleWriteError"; }
/** execution_failed / "Tool result missing: no result before deadline": no result arrived in time. */
export class ResultMissingError extends ExecutionFailedError { override name = "ResultMissingError"; }
/** execution_failed / "cancelled: <reason>": the call was cancelled. */
export class CancelledError extends ExecutionFailedError { override name = "CancelledError"; }

/**
 * Returns the ToolError subclass for a failed result (ResultMissingError and
 * CancelledError for those execution_failed messages), or undefined for an
 * ok result.
 */
export function toolError(result: Result, refused = false): ToolError | undefined {
  if (result.ok) return undefined;
  switch (result.code) {
    case "input_invalid": return new InputInvalidError(result, refused);
    case "not_available": return new NotAvailableError(result, refused);
    case "STALE_WRITE": return new StaleWriteError(result, refused);
  }
  const msg = result.error ?? "";
  if (msg.startsWith("Tool result missing:")) return new ResultMissingError(result, refused);
  if (msg.startsWith("cancelled:")) return new CancelledError(result, refused);
  return new ExecutionFailedError(result, refused);
}

/** Returns the result's value when it is ok, else throws its ToolError. */
export function unwrap(result: Result): string {
  const err = toolError(result);
  if (err) throw err;
  return result.value ?? "";
}

/** ClientError reports the client's own failure: not an answer to a call. */
export class ClientError extends CapstanError {
  override name = "ClientError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The server refused an operation for lack of permission (NATS permissions). */
export class PermissionDeniedError extends ClientError { override name = "PermissionDeniedError"; }

/** A wait was aborted by its AbortSignal; `cause` is the signal's reason. */
export class AbortError extends ClientError {
  override name = "AbortError";
}

/**
 * The result refers to no blob: its output was not cut, was too small or
 * too large to store, or blobs are off (the Go client's ErrNoBlob).
 */
export class NoBlobError extends ClientError {
  override name = "NoBlobError";
  /** The call whose result has no blob. */
  readonly callID: string;
  constructor(callID: string) {
    super(`capstan: blob of ${callID}: the result refers to no blob`);
    this.callID = callID;
  }
}

/**
 * The blob is no longer stored (it expired with the bucket's TTL, 25 h) or
 * was never completely stored (the Go client's ErrBlobNotFound).
 */
export class BlobNotFoundError extends ClientError {
  override name = "BlobNotFoundError";
  /** The reference whose chunks are not stored. */
  readonly ref: BlobRef;
  constructor(ref: BlobRef) {
    super(`capstan: blob ${ref.bucket}/${ref.name}: blob not found (expired, or never completely stored)`);
    this.ref = ref;
  }
}

/**
 * The stored bytes do not match the reference's size or SHA-256 (the Go
 * client's ErrBlobCorrupt). `reason` says which, e.g. "SHA-256 <hex>, the
 * reference says <hex>".
 */
export class BlobCorruptError extends ClientError {
  override name = "BlobCorruptError";
  /** The reference the stored bytes do not match. */
  readonly ref: BlobRef;
  /** What differs. */
  readonly reason: string;
  constructor(ref: BlobRef, reason: string) {
    super(`capstan: blob ${ref.bucket}/${ref.name}: blob does not match its reference: ${reason}`);
    this.ref = ref;
    this.reason = reason;
  }
}

/**
 * The workers refused a decision on a held call (or the client did, for
 * the same reason, before asking them): the call is not held ("no held
 * call <call_id>"), was decided already ("already approved by alice"), the
 * hash names other arguments ("approval does not match the call's
 * arguments"), or the decider may not decide ("<by> is not an approver of
 * personality <p> (approval.approvers)"). `reason` is that message, as the
 * workers give it; the Go client's DecisionRefusedError.
 */
export class DecisionRefusedError extends CapstanError {
  override name = "DecisionRefusedError";
  /** The call the decision was about. */
  readonly callID: string;
  /** Why it was refused: the workers' message. */
  readonly reason: string;
  constructor(callID: string, reason: string) {
    super(`capstan: call ${callID}: ${reason}`);
    this.callID = callID;
    this.reason = reason;
  }
}

/**
 * No worker answers decision requests (none is connected, or the subject
 * is not served): the Go client's ErrNoWorker.
 */
export class NoWorkerError extends ClientError {
  override name = "NoWorkerError";
  /** The call the decision was about. */
  readonly callID: string;
  constructor(callID: string, options?: { cause?: unknown }) {
    super(`capstan: decide ${callID}: no worker answers decision requests`, options);
    this.callID = callID;
  }
}

// --- helpers of the client modules (not exported by the package) ---------

/** A bus error as a ClientError (PermissionDeniedError when the server refused for lack of permission). */
export function wrapBusError(context: string, e: unknown): ClientError {
  if (e instanceof ClientError) return e;
  const msg = (e as Error)?.message ?? String(e);
  if (/permission/i.test(msg)) return new PermissionDeniedError(`${context}: ${msg}`, { cause: e });
  return new ClientError(`${context}: ${msg}`, { cause: e });
}

/** Resolves or rejects with p, or rejects with AbortError when signal aborts first. */
export function raceAbort<T>(p: Promise<T>, signal: AbortSignal | undefined, what: string): Promise<T> {
  if (!signal) return p;
  if (signal.aborted) {
    p.catch(() => {});
    return Promise.reject(new AbortError(`${what}: aborted`, { cause: signal.reason }));
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new AbortError(`${what}: aborted`, { cause: signal.reason }));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(
      (v) => { signal.removeEventListener("abort", onAbort); resolve(v); },
      (e) => { signal.removeEventListener("abort", onAbort); reject(e); },
    );
  });
}
