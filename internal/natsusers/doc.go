// Package natsusers holds the tests of the least-privilege NATS users that
// deployments ship (deploy/nats/auth.conf, included by nats-1..3.conf;
// docs/operations.md, "NATS users"): a real nats-server started from those
// files, a worker, the operator, a backend, the approver and two tenants
// connecting as their users (held calls and their decisions included), and
// every refusal the users rely on checked against the server itself.
package natsusers
