package worker

// EmbeddedServer is where the embedded NATS server a worker started (no
// Config.NATSURL and no Config.NATSConn) listens, for the clients of the
// same program or machine.
type EmbeddedServer struct {
	// URL is the server's client URL, such as nats://127.0.0.1:4222.
	URL string
	// CredsFile is the credentials file clients must use
	// (<DataDir>/embedded.creds, mode 0600): the server refuses any other.
	CredsFile string
}

// Embedded returns the embedded server the worker runs, and false when it
// runs none: before Run started it, after Run returned, or when the worker
// connects to a NATS server of its own. Once Ready is closed the answer
// holds until Run returns.
func (w *Worker) Embedded() (EmbeddedServer, bool) {
	if s := w.embedded.Load(); s != nil {
		return *s, true
	}
	return EmbeddedServer{}, false
}
