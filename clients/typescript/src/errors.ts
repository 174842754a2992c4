// Typed errors: one class per failure kind of the protocol, each carrying the
// protocol's code and message, plus the client's own failures.

import type { Code, Result } from "./protocol.js";

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
