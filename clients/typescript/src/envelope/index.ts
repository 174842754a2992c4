// Provider-native envelopes: model providers' tool-call formats to Capstan
// calls and results back, and the catalog as provider tool definitions. The
// same rules, messages and shapes as the Go package client/envelope; both
// are tested against the recorded payloads in client/envelope/testdata.
//
// Malformed provider input never throws away the other calls of a turn:
// each malformed call becomes a ToolCall with a `failure` (input_invalid,
// the message naming the field), which execute() answers without
// publishing and the to*() functions render in the provider's error shape.
// Only input that is not the provider's shape at all throws (EnvelopeError).

import { createHash } from "node:crypto";
import type { CapstanClient, Turn } from "../client.js";
import {
  BLOB_PART_ERROR,
  BLOB_PART_STRUCTURED,
  DEFAULT_TURN_BUDGET_CHARS,
  RESULT_MISSING,
  failure as failedResult,
  newID,
  validToken,
  type Call,
  type CatalogEntry,
  type Result,
} from "../protocol.js";

/** One tool call of a model's turn, translated. */
export interface ToolCall {
  /** The provider's id of the call ("" when it had none, and for MCP). */
  providerID: string;
  /** The Capstan call: the template's fields, tool and args from the provider, call_id = callID(providerID). */
  call: Call & { call_id: string };
  /** Set when the provider input of this call was malformed: the answer, never published. */
  failure?: Result;
}

/** Thrown for input that is not the provider's shape at all. */
export class EnvelopeError extends Error {
  override name = "EnvelopeError";
}

/** Template of the Capstan calls: session_id and whatever else every call of the turn carries. */
export type CallTemplate = Omit<Call, "tool" | "args"> & { tool?: string; args?: Record<string, unknown> };

// --- ids -------------------------------------------------------------------

/** Prefix of a call_id holding the provider's id in base64url. */
export const ENCODED_PREFIX = "cx-";
/** Prefix of a call_id holding the base64url SHA-256 of a provider id too long to encode. */
export const HASHED_PREFIX = "ch-";

/**
 * The Capstan call_id of a provider's tool-call id: the id itself when it is
 * a valid token not starting with "cx-" or "ch-"; else "cx-" +
 * base64url(UTF-8 of id) when that fits 128 characters; else "ch-" +
 * base64url(SHA-256(id)). One-to-one (the hashed form up to SHA-256
 * collisions). An empty id gets a new random id.
 */
export function callID(providerID: string): string {
  if (providerID === "") return newID();
  const mapped = providerID.startsWith(ENCODED_PREFIX) || providerID.startsWith(HASHED_PREFIX);
  if (validToken(providerID) && !mapped) return providerID;
  const enc = Buffer.from(providerID, "utf8").toString("base64url");
  if (enc.length <= 128 - ENCODED_PREFIX.length) return ENCODED_PREFIX + enc;
  return HASHED_PREFIX + createHash("sha256").update(providerID, "utf8").digest("base64url");
}

/** Reverses callID for the first two forms; undefined for a hashed id or an id that is no mapped form. */
export function providerID(callId: string): string | undefined {
  if (callId.startsWith(ENCODED_PREFIX)) {
    const enc = callId.slice(ENCODED_PREFIX.length);
    return /^[A-Za-z0-9_-]*$/.test(enc) ? Buffer.from(enc, "base64url").toString("utf8") : undefined;
  }
  if (callId.startsWith(HASHED_PREFIX)) return undefined;
  return validToken(callId) ? callId : undefined;
}

// --- shared helpers --------------------------------------------------------

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function absent(v: unknown): boolean {
  return v === undefined || v === null;
}

function newCall(tmpl: CallTemplate, pid: string, tool: string, args: Obj | undefined, problem: string): ToolCall {
  const call = { ...tmpl, call_id: callID(pid), tool, args } as ToolCall["call"];
  const tc: ToolCall = { providerID: pid, call };
  if (problem !== "") tc.failure = failedResult(call, "input_invalid", "invalid tool call: " + problem);
  return tc;
}

function checkName(field: string, name: string): string {
  if (name === "") return field + " is required";
  if (!validToken(name)) {
    const chars = Array.from(name);
    const shown = chars.length <= 64 ? name : chars.slice(0, 64).join("") + "...";
    return `${field} ${JSON.stringify(shown)} must match ^[A-Za-z0-9_-]{1,128}$`;
  }
  return "";
}

function checkID(field: string, v: unknown): [string, string] {
  if (absent(v)) return ["", field + " is required"];
  if (typeof v !== "string") return ["", field + " must be a string"];
  if (v === "") return ["", field + " is required"];
  return [v, ""];
}

/** Reads an optional string field: [value, ok]; ok is false when present and not a string. */
function stringField(v: unknown): [string, boolean] {
  if (absent(v)) return ["", true];
  return typeof v === "string" ? [v, true] : ["", false];
}

/** The message of a malformed arguments string. */
export const ARGUMENTS_NOT_JSON = "is not valid JSON";
export const ARGUMENTS_NOT_OBJECT = "must be a JSON object";

/**
 * Parses a function's arguments as OpenAI sends them: a JSON string holding
 * a JSON object. "" (or white space) is {}. Throws an Error whose message is
 * ARGUMENTS_NOT_JSON or ARGUMENTS_NOT_OBJECT.
 */
export function parseArguments(s: string): Obj {
  // Only the whitespace JSON allows (RFC 8259): "\f" alone is not empty.
  if (/^[ \t\n\r]*$/.test(s)) return {};
  let v: unknown;
  try {
    v = JSON.parse(s);
  } catch {
    throw new Error(ARGUMENTS_NOT_JSON);
  }
  if (!isObj(v)) throw new Error(ARGUMENTS_NOT_OBJECT);
  return v;
}

function args(field: string, v: unknown): [Obj | undefined, string] {
  if (absent(v)) return [{}, ""];
  if (isObj(v)) return [v, ""];
  if (typeof v === "string") {
    try {
      return [parseArguments(v), ""];
    } catch (e) {
      return [undefined, `${field} ${(e as Error).message}`];
    }
  }
  return [undefined, field + " must be a string holding a JSON object"];
}

function object(field: string, v: unknown): [Obj | undefined, string] {
  if (absent(v)) return [{}, ""];
  return isObj(v) ? [v, ""] : [undefined, `${field} ${ARGUMENTS_NOT_OBJECT}`];
}

/** Accepts a JSON string or a parsed value. */
function parsed(data: unknown, shape: string): unknown {
  if (typeof data !== "string" && !(data instanceof Uint8Array)) return data;
  try {
    return JSON.parse(typeof data === "string" ? data : new TextDecoder().decode(data));
  } catch {
    throw new EnvelopeError(`envelope: ${shape}: not valid JSON`);
  }
}

function items(data: unknown, key: string, shape: string): unknown[] {
  let v = data;
  if (isObj(v)) {
    if (absent(v[key])) return [];
    v = v[key];
  }
  if (!Array.isArray(v)) throw new EnvelopeError(`envelope: ${shape}: want a JSON array or an object with ${JSON.stringify(key)}`);
  return v;
}

/**
 * The text of a provider's tool-result message: the value, or
 * "<code>: <error>" for a failure, followed by one line for each part of
 * the tool's output that the result message does not carry, so that the
 * model knows (docs/clients.md, "Rules"; the same lines as the Go Text):
 *
 *     [full output (<size> bytes) stored as blob <bucket>/<name>]
 *     [full error message (<size> bytes) stored as blob <bucket>/<name>]
 *     [structured content (<size> bytes) left out; stored as blob <bucket>/<name>]
 *     [structured content left out: too large for the result message]
 *
 * The first two for a blob of the value or of the error message (unless
 * the text already names the blob, as the worker's "output was dropped"
 * failure does), the third for a blob of the structured payload, the last
 * for structured_omitted without one.
 */
export function text(r: Result): string {
  const t = r.ok ? (r.value ?? "") : `${r.code}: ${r.error}`;
  const lines = omitted(r, t);
  if (lines.length === 0) return t;
  return (t === "" ? lines : [t, ...lines]).join("\n");
}

function omitted(r: Result, t: string): string[] {
  const lines: string[] = [];
  let structuredBlob = false;
  const b = r.blob;
  if (b) {
    const where = `blob ${b.bucket}/${b.name}`;
    const size = b.size === 1 ? "1 byte" : `${b.size} bytes`;
    if (b.part === BLOB_PART_STRUCTURED) {
      structuredBlob = true;
      lines.push(`[structured content (${size}) left out; stored as ${where}]`);
    } else if (t.includes(where)) {
      // The text says so already.
    } else if (b.part === BLOB_PART_ERROR) {
      lines.push(`[full error message (${size}) stored as ${where}]`);
    } else {
      lines.push(`[full output (${size}) stored as ${where}]`);
    }
  }
  if (r.structured_omitted && !structuredBlob) lines.push("[structured content left out: too large for the result message]");
  return lines;
}

function resultAt(results: readonly Result[], i: number, tc: ToolCall): Result {
  const r = results[i];
  if (r) return r;
  if (tc.failure) return tc.failure;
  return { ...failedResult(tc.call, "execution_failed", RESULT_MISSING) };
}

/**
 * Runs the calls of one turn with client.executeParallel and returns one
 * result per call, in input order: malformed calls get their failure. The
 * budget is shared by all calls, malformed ones included; a call whose
 * call_id differs from the provider's id records the provider's id as
 * gen_ai.tool.call.id.
 */
export async function execute(client: CapstanClient, calls: readonly ToolCall[], turn: Turn = {}): Promise<Result[]> {
  const results: Result[] = new Array(calls.length);
  if (calls.length === 0) return results;
  const budget = turn.budgetChars && turn.budgetChars > 0 ? turn.budgetChars : DEFAULT_TURN_BUDGET_CHARS;
  const share = Math.max(Math.floor(budget / calls.length), 1);
  const run: Call[] = [];
  const idx: number[] = [];
  const ids: Record<string, string> = { ...turn.toolCallIDs };
  calls.forEach((tc, i) => {
    if (tc.failure) {
      results[i] = tc.failure;
      return;
    }
    if (tc.providerID !== "" && tc.providerID !== tc.call.call_id) ids[tc.call.call_id] = tc.providerID;
    run.push({ ...tc.call, result_budget_chars: tc.call.result_budget_chars || share });
    idx.push(i);
  });
  if (run.length === 0) return results;
  const got = await client.executeParallel(run, { ...turn, toolCallIDs: ids });
  got.forEach((r, j) => { results[idx[j]!] = r; });
  return results;
}

// --- OpenAI Chat Completions -------------------------------------------------

/** {"role":"tool","tool_call_id","content"}: the message answering one Chat Completions tool call. */
export interface OpenAIChatToolMessage {
  role: "tool";
  tool_call_id: string;
  content: string;
}

/**
 * The tool calls of an OpenAI Chat Completions assistant message (or its
 * tool_calls array), as JSON text or parsed: each
 * {"id","type":"function","function":{"name","arguments"}} becomes one
 * ToolCall, in order, with the template's fields.
 */
export function fromOpenAIChat(data: unknown, tmpl: CallTemplate): ToolCall[] {
  const shape = "OpenAI chat message or tool_calls";
  return items(parsed(data, shape), "tool_calls", shape).map((e, i) => {
    const at = `tool_calls[${i}]`;
    if (!isObj(e)) return newCall(tmpl, "", "", undefined, at + " must be an object");
    const [id, bad] = checkID(at + ".id", e.id);
    if (bad) return newCall(tmpl, id, "", undefined, bad);
    const [typ, ok] = stringField(e.type);
    if (!ok || (typ !== "" && typ !== "function")) return newCall(tmpl, id, "", undefined, `${at}.type must be "function"`);
    const fn = e.function;
    if (!isObj(fn)) return newCall(tmpl, id, "", undefined, at + ".function must be an object");
    const [name, nameOK] = stringField(fn.name);
    if (!nameOK) return newCall(tmpl, id, "", undefined, at + ".function.name must be a string");
    const badName = checkName(at + ".function.name", name);
    if (badName) return newCall(tmpl, id, name, undefined, badName);
    const [a, badArgs] = args(at + ".function.arguments", fn.arguments);
    return newCall(tmpl, id, name, a, badArgs);
  });
}

/** The tool messages answering calls, in order (results[i] answers calls[i]). */
export function toOpenAIChat(calls: readonly ToolCall[], results: readonly Result[]): OpenAIChatToolMessage[] {
  return calls.map((tc, i) => ({ role: "tool", tool_call_id: tc.providerID, content: text(resultAt(results, i, tc)) }));
}

// --- OpenAI Responses ----------------------------------------------------------

/** The input item answering a function_call item of the Responses API. */
export interface OpenAIFunctionCallOutput {
  type: "function_call_output";
  call_id: string;
  output: string;
}

/**
 * The function_call items of an OpenAI Responses API response (or of an
 * array of output items): items of other types are skipped; each
 * {"type":"function_call","call_id","name","arguments"} becomes one
 * ToolCall with call_id as the provider id.
 */
export function fromOpenAIResponses(data: unknown, tmpl: CallTemplate): ToolCall[] {
  const shape = "OpenAI response or output items";
  const out: ToolCall[] = [];
  items(parsed(data, shape), "output", shape).forEach((e, i) => {
    if (!isObj(e) || e.type !== "function_call") return;
    const at = `output[${i}]`;
    const [id, bad] = checkID(at + ".call_id", e.call_id);
    if (bad) return void out.push(newCall(tmpl, id, "", undefined, bad));
    const [name, nameOK] = stringField(e.name);
    if (!nameOK) return void out.push(newCall(tmpl, id, "", undefined, at + ".name must be a string"));
    const badName = checkName(at + ".name", name);
    if (badName) return void out.push(newCall(tmpl, id, name, undefined, badName));
    const [a, badArgs] = args(at + ".arguments", e.arguments);
    out.push(newCall(tmpl, id, name, a, badArgs));
  });
  return out;
}

/** The function_call_output items answering calls, in order. */
export function toOpenAIResponses(calls: readonly ToolCall[], results: readonly Result[]): OpenAIFunctionCallOutput[] {
  return calls.map((tc, i) => ({ type: "function_call_output", call_id: tc.providerID, output: text(resultAt(results, i, tc)) }));
}

// --- Anthropic Messages ----------------------------------------------------------

/** A tool_result content block; is_error only on failures. */
export interface AnthropicToolResult {
  type: "tool_result";
  tool_use_id: string;
  content: string;
  is_error?: true;
}

/** The user message answering a turn's tool_use blocks. */
export interface AnthropicMessage {
  role: "user";
  content: AnthropicToolResult[];
}

/**
 * The tool_use blocks of an Anthropic Messages response (or of its content
 * array): other blocks are skipped; each {"type":"tool_use","id","name",
 * "input"} becomes one ToolCall; input must be an object.
 */
export function fromAnthropic(data: unknown, tmpl: CallTemplate): ToolCall[] {
  const shape = "Anthropic message or content blocks";
  const out: ToolCall[] = [];
  items(parsed(data, shape), "content", shape).forEach((e, i) => {
    if (!isObj(e) || e.type !== "tool_use") return;
    const at = `content[${i}]`;
    const [id, bad] = checkID(at + ".id", e.id);
    if (bad) return void out.push(newCall(tmpl, id, "", undefined, bad));
    const [name, nameOK] = stringField(e.name);
    if (!nameOK) return void out.push(newCall(tmpl, id, "", undefined, at + ".name must be a string"));
    const badName = checkName(at + ".name", name);
    if (badName) return void out.push(newCall(tmpl, id, name, undefined, badName));
    const [input, badInput] = object(at + ".input", e.input);
    out.push(newCall(tmpl, id, name, input, badInput));
  });
  return out;
}

/** The user message answering calls: one tool_result block per call, is_error on failures. */
export function toAnthropic(calls: readonly ToolCall[], results: readonly Result[]): AnthropicMessage {
  return {
    role: "user",
    content: calls.map((tc, i) => {
      const r = resultAt(results, i, tc);
      const block: AnthropicToolResult = { type: "tool_result", tool_use_id: tc.providerID, content: text(r) };
      if (!r.ok) block.is_error = true;
      return block;
    }),
  };
}

// --- MCP ---------------------------------------------------------------------------

/** A translated MCP tools/call request. */
export interface MCPCall extends ToolCall {
  /** The JSON-RPC id (null when the input was the params object alone). */
  requestID: string | number | null;
}

/** The CallToolResult of a Capstan result. */
export interface MCPCallToolResult {
  content: Array<{ type: "text"; text: string }>;
  structuredContent?: Record<string, unknown>;
  isError?: true;
}

/** The JSON-RPC response to a tools/call request. */
export interface MCPResponse {
  jsonrpc: "2.0";
  id: string | number | null;
  result: MCPCallToolResult;
}

/**
 * An MCP tools/call request (or its params object). MCP calls carry no call
 * id of their own (JSON-RPC ids repeat in every session), so the call gets a
 * new call_id unless the template has one.
 */
export function fromMCP(data: unknown, tmpl: CallTemplate): MCPCall {
  const shape = "MCP tools/call";
  let obj = parsed(data, shape);
  if (!isObj(obj)) throw new EnvelopeError("envelope: MCP tools/call: want a JSON-RPC request or its params object");
  let at = "";
  let requestID: string | number | null = null;
  if ("method" in obj) {
    if (obj.method !== "tools/call") throw new EnvelopeError(`envelope: MCP request: method must be "tools/call"`);
    requestID = (obj.id ?? null) as string | number | null;
    at = "params.";
    obj = obj.params;
  }
  let tc: ToolCall;
  if (!isObj(obj)) {
    tc = newCall(tmpl, "", "", undefined, "params must be an object");
  } else {
    const [name, ok] = stringField(obj.name);
    const badName = ok ? checkName(at + "name", name) : "";
    if (!ok) tc = newCall(tmpl, "", "", undefined, at + "name must be a string");
    else if (badName) tc = newCall(tmpl, "", name, undefined, badName);
    else {
      const [a, bad] = object(at + "arguments", obj.arguments);
      tc = newCall(tmpl, "", name, a, bad);
    }
  }
  if (tmpl.call_id) {
    tc.call.call_id = tmpl.call_id;
    if (tc.failure) {
      tc.failure.call_id = tmpl.call_id;
      tc.failure.batch_id = tc.call.batch_id || tmpl.call_id;
    }
  }
  return { ...tc, requestID };
}

/** The CallToolResult of r: one text item, structuredContent for an ok result with an object payload, isError on failure. */
export function mcpResult(r: Result): MCPCallToolResult {
  const out: MCPCallToolResult = { content: [{ type: "text", text: text(r) }] };
  if (r.ok && isObj(r.structured)) out.structuredContent = r.structured;
  if (!r.ok) out.isError = true;
  return out;
}

/** The JSON-RPC response to call with r's CallToolResult. */
export function toMCP(call: MCPCall, r: Result): MCPResponse {
  return { jsonrpc: "2.0", id: call.requestID, result: mcpResult(r) };
}

// --- catalog as provider tool definitions --------------------------------------------

const schemaOf = (e: CatalogEntry): Record<string, unknown> =>
  isObj(e.schema) ? e.schema : { type: "object" };

/** OpenAI Chat Completions tool definitions ({"type":"function","function":{...}}). Names over 64 characters are refused by OpenAI. */
export function openAIChatTools(entries: readonly CatalogEntry[]) {
  return entries.map((e) => ({
    type: "function" as const,
    function: { name: e.name, description: e.description, parameters: schemaOf(e) },
  }));
}

/** OpenAI Responses API function tools ({"type":"function","name",...}). */
export function openAIResponsesTools(entries: readonly CatalogEntry[]) {
  return entries.map((e) => ({ type: "function" as const, name: e.name, description: e.description, parameters: schemaOf(e) }));
}

/** Anthropic Messages tool definitions ({"name","description","input_schema"}). */
export function anthropicTools(entries: readonly CatalogEntry[]) {
  return entries.map((e) => ({ name: e.name, description: e.description, input_schema: schemaOf(e) }));
}

/** MCP tools/list entries ({"name","description","inputSchema"}). */
export function mcpTools(entries: readonly CatalogEntry[]) {
  return entries.map((e) => ({ name: e.name, description: e.description, inputSchema: schemaOf(e) }));
}
