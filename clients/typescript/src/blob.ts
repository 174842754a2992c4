// Reading a call's full output stored by reference (protocol.md, "Large
// outputs by reference"), as the Go client's Client.Blob reads it: from the
// blob's chunk subject, which a tenant's NATS user may read for its own
// personality (deploy/nats/auth.conf), never from the object's metadata,
// which names no personality and which tenants may not read.

import { createHash } from "node:crypto";
import {
  DeliverPolicy,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
} from "@nats-io/jetstream";
import {
  AbortError,
  BlobCorruptError,
  BlobNotFoundError,
  ClientError,
  NoBlobError,
  wrapBusError,
} from "./errors.js";
import { blobChunkSubject, type BlobRef, type Result } from "./protocol.js";
import { addReader } from "./reader.js";

/** Most chunks asked for in one pull (each at most 128 KiB). */
const FETCH_BATCH = 64;
/** How long one pull waits for chunks: the Go client's 5 s. */
const FETCH_WAIT_MS = 5000;

/** What a blob read needs of the client. */
export interface BlobReader {
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/**
 * Yields the bytes of the blob that r refers to, chunk by chunk in order,
 * checking them against the reference: more bytes than its size throw
 * BlobCorruptError at once, and the step that would end the iteration first
 * compares the size and the SHA-256 digest and throws BlobCorruptError
 * instead when either differs, so a caller that reads to the end never
 * accepts corrupt data without an error. A result without a reference
 * throws NoBlobError; chunks no longer stored, BlobNotFoundError; a
 * reference that is not well-formed, ClientError.
 *
 * The chunks are read with a consumer whose one filter is the chunk
 * subject, $O.<bucket>.C.<nuid> (so the create request's subject carries it
 * and NATS permissions can bind it to a personality), deliver policy all,
 * until the last stored message; it needs no stream or consumer
 * information.
 */
export async function* readBlob(r: BlobReader, result: Pick<Result, "call_id" | "blob">, signal?: AbortSignal):
  AsyncGenerator<Uint8Array, void, undefined> {
  const ref = checkRef(result);
  const subject = blobChunkSubject(ref);
  const stream = "OBJ_" + ref.bucket;
  const what = `capstan: blob ${ref.bucket}/${ref.name}`;
  const info = await addReader(r.jsm, stream, subject, DeliverPolicy.All, what, signal, `${what}: read ${subject}`);
  const name = info.name;
  const sum = createHash("sha256");
  let n = 0;
  let current: ConsumerMessages | undefined;
  const onAbort = () => current?.stop();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    let remaining = info.num_pending;
    if (remaining === 0 && ref.size !== 0) throw new BlobNotFoundError(ref);
    const consumer = r.js.consumers.getConsumerFromInfo(info);
    while (remaining > 0) {
      try {
        current = await consumer.fetch({ max_messages: Math.min(remaining, FETCH_BATCH), expires: FETCH_WAIT_MS });
      } catch (e) {
        throw wrapBusError(`${what}: read ${subject}`, e);
      }
      let got = 0;
      try {
        for await (const m of current) {
          if (signal?.aborted) break;
          got++;
          n += m.data.length;
          if (n > ref.size) throw new BlobCorruptError(ref, `more than its ${ref.size} bytes are stored`);
          sum.update(m.data);
          yield m.data;
          if (m.info.pending === 0) remaining = 0;
        }
      } catch (e) {
        if (e instanceof ClientError) throw e;
        throw wrapBusError(`${what}: read ${subject}`, e);
      } finally {
        current.stop();
      }
      if (signal?.aborted) throw new AbortError(`${what}: aborted`, { cause: signal.reason });
      if (got === 0) break; // expired meanwhile: the size check tells
      remaining = Math.max(remaining - got, 0);
    }
  } finally {
    signal?.removeEventListener("abort", onAbort);
    r.jsm.consumers.delete(stream, name).catch(() => {});
  }
  if (n !== ref.size) throw new BlobCorruptError(ref, `${n} bytes stored, the reference says ${ref.size}`);
  const digest = sum.digest("hex");
  if (digest !== ref.sha256.toLowerCase()) {
    throw new BlobCorruptError(ref, `SHA-256 ${digest}, the reference says ${ref.sha256}`);
  }
}

/** The reference of a result, checked: NoBlobError without one, ClientError when malformed. */
function checkRef(result: Pick<Result, "call_id" | "blob">): BlobRef {
  const ref = result.blob;
  if (ref === undefined || ref === null) throw new NoBlobError(result.call_id);
  const what = `capstan: blob of ${result.call_id}`;
  try {
    blobChunkSubject(ref);
  } catch (e) {
    throw new ClientError(`${what}: ${(e as Error).message}`);
  }
  if (typeof ref.sha256 !== "string" || !/^[0-9a-fA-F]{64}$/.test(ref.sha256)) {
    throw new ClientError(`${what}: sha256 ${JSON.stringify(ref.sha256)} is not a hex SHA-256 digest`);
  }
  if (!Number.isSafeInteger(ref.size) || ref.size < 0) {
    throw new ClientError(`${what}: size ${JSON.stringify(ref.size)} is not a byte count`);
  }
  return ref;
}
