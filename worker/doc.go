// Package worker builds a Capstan worker: it pulls tool calls from its pool's
// JetStream consumer, checks each against the capability policy, runs the
// tool with scoped access, and publishes exactly one result per call.
//
// # A call's life, in the order the code runs it
//
// Run (run.go) connects, opens the buckets, loads the personalities and
// watches them, registers the tools in the catalog, subscribes to cancel
// requests and watches the cancels bucket (internal/cancelbook: every
// cancel request is booked in memory), and starts one handler goroutine per slot. pull
// fetches at most as many calls as there are free slots and hands each to a
// handler, which hands it to the call executor (internal/callexec).
//
// Each delivered message gets an Executor (internal/callexec): the message, the
// decoded call, the call's span, and what the handler acquires for it (its
// in-flight entry, its lease). Its methods are the steps below, each verb
// with one meaning: Run is a delivery's whole life; process is the
// pipeline (admit: the gates; run: dry run, or execute, then shape);
// execute is the tool itself under its timeout; deliver publishes a
// computed result (with retries); answerWithoutRunning publishes a
// refusal; complete audits and acks. Executor.Run, through the one
// switch at its end and its early returns, decides what becomes of the
// delivery.
//
//  1. Decode the subject and the body; a malformed call is answered and
//     dead-lettered (rejectMalformed). The subject's personality decides;
//     a body naming another is refused.
//  2. The results stream is the ledger. On a redelivery, and for a call of
//     an exclusive tool (tool.SideEffects) once its lease is held (step 4),
//     storedResult reads the call's result subject from the stream's
//     leader; a call already answered is audited and acked without running
//     (answeredBefore).
//  3. register enters the call in the in-flight book (cancelbook.Book),
//     which gives it the cancel request booked for it, if any, under the
//     same lock that books requests.
//  4. An exclusive call takes its fenced lease (internal/lease); the heartbeat
//     sends InProgress and refreshes the lease every AckWait/3. Other calls
//     have a nil lease, which holds nothing.
//  5. process (callexec/pipeline.go) runs the gates in the order of
//     docs/capabilities.md (admit), then the tool with its scoped
//     accessors, the reducer, redaction and the result budget (runTool),
//     and plans a blob for an output too large for the result (blob.go).
//     execute hands the tool to a runner (callexec/runners.go: long-lived
//     goroutines, reused from call to call) and waits for it, its
//     timeout or its cancel, whichever comes first: a tool that ignores
//     its cancellation keeps its runner, never the slot.
//  6. deliver publishes the result with bus.PublishFirst: the results
//     stream stores the first result of a call and refuses any later one
//     (lostRace acks a run that lost). A publish that may succeed later is
//     retried for ResultRetryLimit; one that never can dead-letters the
//     call (callexec/publish.go).
//  7. complete queues the audit record (internal/auditlog: records are
//     stored in batches by group commit), releases the lease and returns: the slot
//     is free once the result is stored. The audit log acks the call,
//     without waiting for the server, once its record is stored (or hands
//     it back when it cannot be); until then the delivery is detached
//     and the pool still counts it, so a shutdown waits for it.
//
// Every bus operation of a call runs under BoundCtx: a child of opsBase
// (opTimeout, and never past the shutdown margin) carrying the call's
// span, so its spans and log lines stay in the call's trace.
//
// What happens to a delivery is one of: answer it (publish a result, audit,
// ack), hand it back (Nak(0): shutdown), retry it later (retryLater: Nak
// with backoff after an infrastructure fault, the reason kept in the
// failures bucket), drop it (another run answers: a lost lease, a lost
// race), or terminate it (a dead letter that cannot be written for good).
// Deliveries that run out of MaxDeliver come back as advisories and are
// abandoned with a dead letter and an abandonment result (callexec/abandoned.go).
//
// docs/architecture.md ("The worker's rooms") names the rooms and which
// imports which.
//
// docs/protocol.md ("Delivery, leases and retries") and docs/reliability.md
// state the guarantees this code keeps and the tests that prove them.
package worker
