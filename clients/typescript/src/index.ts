// @capstanhq/client: dispatch LLM tool calls to Capstan workers over NATS
// JetStream (protocol version 2), and translate model providers' tool-call
// formats (see ./envelope).

export { CapstanClient, UnknownPersonalityError, DEFAULT_WAIT_MS, WAIT_SLACK_MS } from "./client.js";
export type { ClientOptions, Turn, WaitOptions, ProgressOptions, ApprovalRequestsOptions } from "./client.js";
export { DECIDE_TIMEOUT_MS } from "./approvals.js";
export type { ApproveOptions, DecidedCall, Decision, DenyOptions } from "./approvals.js";
export {
  AbortError,
  BlobCorruptError,
  BlobNotFoundError,
  CancelledError,
  CapstanError,
  ClientError,
  DecisionRefusedError,
  ExecutionFailedError,
  InputInvalidError,
  NoBlobError,
  NoWorkerError,
  NotAvailableError,
  PermissionDeniedError,
  ResultMissingError,
  StaleWriteError,
  ToolError,
  toolError,
  unwrap,
} from "./errors.js";
export {
  APPROVAL_APPROVED,
  APPROVAL_DENIED,
  AUDIENCES,
  BLOB_PART_ERROR,
  BLOB_PART_STRUCTURED,
  BLOB_PART_VALUE,
  BLOB_TYPE_JSON,
  BLOB_TYPE_TEXT,
  CODES,
  DEFAULT_PERSONALITY,
  DEFAULT_POOL,
  DEFAULT_PREFIX,
  DEFAULT_TURN_BUDGET_CHARS,
  MAX_APPROVAL_REASON,
  MAX_CALL_BYTES,
  Names,
  PROGRESS_KIND_APPROVAL_REQUIRED,
  PROTOCOL_VERSION,
  RESULT_MISSING,
  blobChunkSubject,
  checkCall,
  encodeCall,
  failure,
  newID,
  validToken,
} from "./protocol.js";
export type {
  ApprovalDecision, ApprovalGrant, ApprovalRequest, ApprovalStamp, ApprovalSummary, Hold,
} from "./protocol.js";
export type { Audience, BlobPart, BlobRef, Call, CatalogEntry, Code, Progress, Result } from "./protocol.js";
export { mayCall, parsePersonality, permissionMatch } from "./personality.js";
export type { PersonalityGates } from "./personality.js";
