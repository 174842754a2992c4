// Package chaos holds Capstan's fault-injection tests (docs/reliability.md):
// workers killed with SIGKILL mid-call and between publishing a result and
// acknowledging its call, the NATS server restarted with a thousand calls in
// flight, a three-node JetStream cluster losing two nodes while calls
// flow, and a cluster of nats-server processes whose leading node is cut off
// from the others (routes through proxies the tests own) or paused with
// SIGSTOP. Each test counts calls, results and executions and fails on a lost or
// duplicated answer. The package has no code outside its tests.
package chaos
