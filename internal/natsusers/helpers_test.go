package natsusers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/bus/bustest"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/tools/builtin"
	"github.com/capstanhq/capstan/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// passwords are the users' passwords in these tests, given to the server
// through the environment variables deploy/nats/auth.conf reads.
var passwords = map[string]string{
	"worker":   "worker-test-password",
	"operator": "operator-test-password",
	"backend":  "backend-test-password",
	"approver": "approver-test-password",
	// Tenants: one user per tenant, bound to the personality of its name.
	"tenant-researcher": "researcher-test-password",
	"tenant-support":    "support-test-password",
}

// passwordVar is the environment variable of a user's password.
func passwordVar(user string) string {
	return "CAPSTAN_NATS_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

// TestMain sets the password variables before any configuration is parsed
// (nats-server resolves $VAR references when it parses the file).
func TestMain(m *testing.M) {
	for user, pw := range passwords {
		if err := os.Setenv(passwordVar(user), pw); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	goleak.VerifyTestMain(m)
}

// nodeConf is the configuration of the first cluster node, as docker-compose.yml mounts it.
const nodeConf = "../../deploy/nats/nats-1.conf"

// deployServer starts a nats-server from deploy/nats (bustest.ConfigServer).
func deployServer(t *testing.T) string {
	t.Helper()
	return bustest.ConfigServer(t, nodeConf)
}

// as returns url with user and its test password.
func as(url, user string) string { return bustest.UserURL(url, user, passwords[user]) }

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newWorker returns a worker with the built-in tools (or tools, when
// given) connecting as the worker user; adjust, when not nil, changes its
// configuration first.
func newWorker(t *testing.T, url string, adjust func(*worker.Config), tools ...tool.Tool) *worker.Worker {
	t.Helper()
	cfg := worker.Config{NATSURL: as(url, "worker"), WorkerID: "w-" + t.Name(), Concurrency: 4,
		ShutdownGrace: time.Second, SecretsBackend: worker.SecretsNone, Logger: quietLog()}
	cfg.WorkerID = strings.NewReplacer("/", "-").Replace(cfg.WorkerID)
	if adjust != nil {
		adjust(&cfg)
	}
	if len(tools) == 0 {
		tools = builtin.All()
	}
	w, err := worker.New(cfg, tools...)
	require.NoError(t, err)
	return w
}

// inboxPrefix is the reply-subject prefix user may subscribe to:
// _INBOX_<name> for a tenant-<name>, _INBOX_approver for the approver,
// else _INBOX.
func inboxPrefix(user string) string {
	if name, ok := strings.CutPrefix(user, "tenant-"); ok {
		return "_INBOX_" + name
	}
	if user == "approver" {
		return "_INBOX_approver"
	}
	return "_INBOX"
}

// newClient connects the Go client as user; closed when the test ends. A
// tenant's client acts under the personality of the tenant's name, with
// the tenant's inbox prefix.
func newClient(t *testing.T, url, user string) *client.Client {
	t.Helper()
	personality, _ := strings.CutPrefix(user, "tenant-")
	if personality == user {
		personality = ""
	}
	c, err := client.New(ctxT(t, 30*time.Second), client.Config{NATSURL: as(url, user), Name: user + " " + t.Name(),
		Personality: personality, InboxPrefix: inboxPrefix(user)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// busConn connects as user with the bus package, as the worker does.
func busConn(t *testing.T, url, user string) *bus.Conn {
	t.Helper()
	c, err := bus.Connect(ctxT(t, 30*time.Second), bus.Config{URL: as(url, user), Name: user + " " + t.Name(), InboxPrefix: inboxPrefix(user)})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// callUntil submits an echo call of personality as the client c, again and
// again, until its result satisfies done (a worker applies a personality
// change at the next call after its watch has seen it), and returns it.
func callUntil(t *testing.T, c *client.Client, personality string, done func(client.Result) bool) client.Result {
	t.Helper()
	var last client.Result
	require.Eventually(t, func() bool {
		res := c.ExecuteParallel(ctxT(t, 30*time.Second), client.Turn{Wait: 20 * time.Second}, []client.Call{{
			Tool: "echo", SessionID: "s", PersonalityID: personality, Args: json.RawMessage(`{"text":"hello"}`)}})
		last = res[0]
		return done(last)
	}, 20*time.Second, 20*time.Millisecond, "last result: %+v", last)
	return last
}

func isOK(r client.Result) bool { return r.OK }

// rawConn is a plain nats.go connection of one user, with no Capstan code
// between the test and the server: what the server refuses, it reports on
// errs ("Permissions Violation for Publish to ...").
type rawConn struct {
	nc   *nats.Conn
	errs chan error
}

func dialRaw(t *testing.T, url, user string) *rawConn {
	t.Helper()
	r := &rawConn{errs: make(chan error, 64)}
	nc, err := nats.Connect(url, nats.UserInfo(user, passwords[user]), nats.Name("raw "+user), nats.CustomInboxPrefix(inboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case r.errs <- err:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	r.nc = nc
	return r
}

// requireRefused sends body to subject as a request (a reply subject the user
// may subscribe to) and requires the server to refuse the publish with a
// permissions violation naming subject.
func (r *rawConn) requireRefused(t *testing.T, subject string, body []byte) {
	t.Helper()
	require.NoError(t, r.nc.PublishRequest(subject, r.nc.NewRespInbox(), body))
	// The server handles a connection's messages in order: by the time the
	// PONG of this flush arrives, the violation has been sent.
	require.NoError(t, r.nc.Flush())
	want := fmt.Sprintf("Permissions Violation for Publish to %q", subject)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-r.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return
			}
		case <-deadline:
			t.Fatalf("the server did not refuse the publish to %q", subject)
		}
	}
}

// requireAnswered sends a request to subject and requires an answer: the
// user may publish there.
func (r *rawConn) requireAnswered(t *testing.T, subject string, body []byte) {
	t.Helper()
	_, err := r.nc.Request(subject, body, 10*time.Second)
	require.NoError(t, err, subject)
}
