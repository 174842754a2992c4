// Command worker runs a Capstan worker: it serves its pool's tool calls from
// NATS JetStream until SIGTERM or SIGINT, then drains within
// CAPSTAN_SHUTDOWN_GRACE. Configuration comes from CAPSTAN_* environment
// variables (docs/operations.md). All of it is package workercmd, which a
// worker binary with tools of its own calls the same way.
package main

import "github.com/capstanhq/capstan/workercmd"

func main() { workercmd.Main() }
