// The short-lived consumer a client reads a stream's subjects with: one
// filter (which a tenant's NATS permissions can bind), no acks, its state
// in memory, gone on its own a minute after its last use. Blob reads and
// approval listings both use it.

import { AckPolicy, type ConsumerInfo, type DeliverPolicy, type JetStreamManager } from "@nats-io/jetstream";
import { AbortError, raceAbort, wrapBusError } from "./errors.js";
import { newID } from "./protocol.js";

/** The reading consumer goes away on its own this long (ns) after its last use. */
const INACTIVE_NS = 60_000 * 1_000_000;

/**
 * addReader creates a reading consumer on stream with filter, delivering
 * per deliver. what names the read in errors: an aborted signal is an
 * AbortError, a refusal of the server the wrapped bus error, named
 * failWhat (default what).
 */
export async function addReader(jsm: JetStreamManager, stream: string, filter: string, deliver: DeliverPolicy,
  what: string, signal?: AbortSignal, failWhat = what): Promise<ConsumerInfo> {
  if (signal?.aborted) throw new AbortError(`${what}: aborted`, { cause: signal.reason });
  try {
    return await raceAbort(jsm.consumers.add(stream, {
      name: newID(),
      filter_subject: filter,
      deliver_policy: deliver,
      ack_policy: AckPolicy.None,
      mem_storage: true,
      num_replicas: 1,
      inactive_threshold: INACTIVE_NS,
    }), signal, what);
  } catch (e) {
    if (e instanceof AbortError) throw e;
    throw wrapBusError(failWhat, e);
  }
}
