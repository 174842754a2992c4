package client_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus/bustest"
)

// benchTurn sends one turn of 100 echo calls per iteration and reports
// calls per second. Compare BenchmarkTurnCapstanWorker (the real worker:
// decode, lease, every gate, schema, shaping, audit) with
// BenchmarkTurnRawResponder (decode and answer only, raw JetStream) from
// one run: the ratio is Capstan's overhead over the bus.
func benchTurn(b *testing.B, c *client.Client) {
	const perTurn = 100
	calls := make([]client.Call, perTurn)
	for i := range calls {
		calls[i] = client.Call{Tool: "echo", SessionID: "bench", Args: json.RawMessage(fmt.Sprintf(`{"text":"call %d"}`, i))}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; b.Loop(); i++ {
		res := c.ExecuteParallel(b.Context(), client.Turn{BatchID: fmt.Sprintf("t%d", i), Wait: time.Minute}, calls)
		for _, r := range res {
			if !r.OK {
				b.Fatalf("%s: %s", r.Code, r.Error)
			}
		}
	}
	b.ReportMetric(float64(b.N*perTurn)/time.Since(start).Seconds(), "calls/s")
}

func BenchmarkTurnCapstanWorker(b *testing.B) {
	url := bustest.Server(b)
	startWorker(b, url)
	benchTurn(b, benchClient(b, url))
}

func BenchmarkTurnRawResponder(b *testing.B) {
	url := bustest.Server(b)
	startResponder(b, url, "", "default")
	benchTurn(b, benchClient(b, url))
}

func benchClient(b *testing.B, url string) *client.Client {
	c, err := client.New(b.Context(), client.Config{NATSURL: url, NATSCreds: bustest.Creds(url)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return c
}
