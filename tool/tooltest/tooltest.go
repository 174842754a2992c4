// Package tooltest runs a tool the way a Capstan worker does, without NATS,
// for the tool's own tests: the call's arguments are checked against the
// tool's schema, the personality's gates apply (toolset, permissions,
// capability validation and resolution, failing closed), the tool gets real
// scoped accessors built from the resolved grant (files under the
// personality's fs_reach, HTTP through the fetcher with its host checks,
// processes through the sandboxed runner, secrets from a map), and its
// result is shaped as the worker shapes it (reducer, secret redaction,
// budget trim, untrusted wrap, size limit). The steps are the worker's own
// (they are shared, not copied).
//
// What needs NATS is left out: rate limits, cancellation records, the
// storage accessor (tc.KV is nil, so the memory tools answer that storage is
// not configured) and STALE_WRITE read records (tc.Reads is nil).
//
//	out := tooltest.Run(t, weather.Tool(), `{"city":"Oslo"}`,
//		tooltest.Personality("id: p\ntoolset: [weather]\npermissions: [\"weather:read\"]\nsafety: {network: {allow: [api.weather.example]}}\n"),
//		tooltest.Resolve("api.weather.example", srv.Listener.Addr().String()))
//	require.True(t, out.Result.OK, out.Result.Error)
package tooltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/argschema"
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/pipeline"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/shape"
	"github.com/capstanhq/capstan/tool"
	"github.com/capstanhq/capstan/wire"
)

// DefaultLimitBytes is the result size limit of a run: the worker's default
// (1 MiB) less the room it keeps for headers.
const DefaultLimitBytes = 1<<20 - 2<<10

// Outcome is what a run produced.
type Outcome struct {
	// Result is the result message the worker would publish.
	Result wire.Result
	// Decision is "allowed" for a call that ran, else the gate that
	// refused it ("toolset", "permission", "schema", "capability", ...).
	Decision string
	// Progress lists the events the tool emitted, in order, audience
	// defaulted to internal.
	Progress []tool.Progress
	// Denials lists the codes of the capability denials the accessors
	// raised (SECRET_DESTINATION, ...), as the audit record has them.
	Denials []string
	// Context is the tool context the tool ran with (nil when refused
	// before): its working dir, budget and accessors.
	Context *tool.Context
}

type config struct {
	personality string
	call        wire.Call
	secrets     map[string]string
	hosts       map[string]string
	home        string
	timeout     time.Duration
	limit       int
	reducer     tool.Reducer
}

// Option changes a run.
type Option func(*config)

// Personality sets the personality document (YAML or JSON) the call runs
// under. Default: one named "test" whose toolset is the tool and that
// grants its permissions, and nothing else (no files, hosts, secrets,
// processes).
func Personality(doc string) Option { return func(c *config) { c.personality = doc } }

// Call sets the call's fields other than tool and args (session, working
// dir, result budget, narrow_tools, ...). Default: call_id "test-call",
// session_id "test-session".
func Call(call wire.Call) Option { return func(c *config) { c.call = call } }

// Secrets gives the secrets backend's values, by ref.
func Secrets(values map[string]string) Option { return func(c *config) { c.secrets = values } }

// Resolve makes the fetcher resolve host to addr (an IP, or an IP and a
// port as httptest servers give them, whose port is ignored: the URL's
// port is dialed), so a test reaches its loopback server under the name
// the tool and the personality use. Loopback addresses are private: the
// personality must set safety.network.allow_private_urls.
func Resolve(host, addr string) Option {
	return func(c *config) {
		if c.hosts == nil {
			c.hosts = map[string]string{}
		}
		c.hosts[host] = addr
	}
}

// Home sets ${HOME} of the personality and the home of the file floor;
// default a temporary directory.
func Home(dir string) Option { return func(c *config) { c.home = dir } }

// Timeout bounds the tool's run; default 60s.
func Timeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// LimitBytes sets the result message's size limit; default
// DefaultLimitBytes.
func LimitBytes(n int) Option { return func(c *config) { c.limit = n } }

// Reducer applies fn to the tool's result, as a reducer registered with
// the worker for it would be. The built-in tools' own reducers apply
// without it.
func Reducer(fn tool.Reducer) Option { return func(c *config) { c.reducer = fn } }

// Run runs t with args (a JSON object) as a worker would and returns the
// outcome. A problem of the test's own making (an invalid tool, schema or
// personality) fails t at once.
func Run(t testing.TB, tl tool.Tool, args string, opts ...Option) Outcome {
	t.Helper()
	c := config{timeout: 60 * time.Second, limit: DefaultLimitBytes}
	for _, o := range opts {
		o(&c)
	}
	if c.home == "" {
		c.home = t.TempDir()
	}
	if err := tl.Validate(); err != nil {
		t.Fatalf("tooltest: %v", err)
	}
	schema, err := argschema.Compile(tl.Name, tl.Schema)
	if err != nil {
		t.Fatalf("tooltest: %v", err)
	}
	if c.personality == "" {
		perms, _ := json.Marshal(tl.Permissions)
		c.personality = fmt.Sprintf("id: test\ntoolset: [%s]\npermissions: %s\n", tl.Name, perms)
	}
	p, err := capability.Parse([]byte(c.personality), capability.Env{Home: c.home})
	if err != nil {
		t.Fatalf("tooltest: personality: %v", err)
	}
	call := c.call
	call.Tool, call.Args = tl.Name, json.RawMessage(args)
	if call.CallID == "" {
		call.CallID = "test-call"
	}
	if call.SessionID == "" {
		call.SessionID = "test-session"
	}
	if call.PersonalityID == "" {
		call.PersonalityID = p.ID
	}
	refused := func(ref *capability.Refusal) Outcome {
		return Outcome{Decision: ref.Decision, Result: wire.Result{CallID: call.CallID, BatchID: call.EffectiveBatchID(), Tool: call.Tool, Code: ref.Code, Error: ref.Message}}
	}
	if ref := capability.ExcludeGate(call.Tool, call.ExcludeTools); ref != nil {
		return refused(ref)
	}
	if ref := pipeline.Surface(&tl, p, &call); ref != nil {
		return refused(ref)
	}
	tc := pipeline.ToolContext(&call, p)
	var (
		mu       sync.Mutex
		progress []tool.Progress
		denials  []string
	)
	tc.EmitFunc = func(ev tool.Progress) error {
		if ev.Audience == "" {
			ev.Audience = tool.AudienceInternal
		}
		if !ev.Audience.Valid() || (ev.Percent != nil && (*ev.Percent < 0 || *ev.Percent > 100)) {
			return fmt.Errorf("%w: audience %q", tool.ErrInvalidProgress, ev.Audience)
		}
		mu.Lock()
		progress = append(progress, ev)
		mu.Unlock()
		return nil
	}
	if tl.Available != nil && !tl.Available(context.Background(), tc) {
		return refused(&capability.Refusal{Decision: "availability", Code: tool.CodeNotAvailable, Message: "Tool " + call.Tool + " is not currently available"})
	}
	if ref := pipeline.Arguments(&tl, schema, p, &call); ref != nil {
		return refused(ref)
	}
	grant, ref := pipeline.Resolve(&tl, p, &call)
	if ref != nil {
		return refused(ref)
	}
	if grant.FS != nil {
		tc.WorkingDir = grant.FS.WorkingDir
	}
	onDeny := func(err error) {
		if code, ok := tool.DenialCode(err); ok {
			mu.Lock()
			denials = append(denials, code)
			mu.Unlock()
		}
	}
	pipeline.Attach(tc, grant, c.backends(t), onDeny)

	ctx, cancel := context.WithTimeoutCause(context.Background(), c.timeout, fmt.Errorf("timed out after %s", c.timeout))
	defer cancel()
	res, err := pipeline.Call(ctx, &tl, call.Args, tc)
	if ctx.Err() != nil {
		// As the worker: a call whose context ended answers with its cause.
		res, err = tool.Result{}, context.Cause(ctx)
	}
	res, err = pipeline.Outcome(tl.Name, res, err)
	if err != nil {
		t.Fatalf("tooltest: infrastructure fault (a worker would redeliver the call): %v", err)
	}
	reducers := shape.NewReducers()
	if fn, ok := pipeline.BuiltinReducers[tl.Name]; ok && c.reducer == nil {
		c.reducer = fn
	}
	if c.reducer != nil {
		if _, err := reducers.Register(tl.Name, c.reducer); err != nil {
			t.Fatalf("tooltest: %v", err)
		}
	}
	out, _, fits := pipeline.Shape(&tl, reducers, &call, tc, res, "tooltest", pipeline.Limits{Bytes: c.limit, StructuredBytes: min(256<<10, c.limit)})
	if !fits {
		out.OK, out.Value, out.Code, out.Error = false, "", tool.CodeExecutionFailed, "result too large for the message limit"
	}
	mu.Lock()
	defer mu.Unlock()
	return Outcome{Result: out, Decision: "allowed", Progress: progress, Denials: denials, Context: tc}
}

func (c *config) backends(t testing.TB) pipeline.Backends {
	fcfg := fetch.Config{}
	if len(c.hosts) > 0 {
		hosts := c.hosts
		fcfg.LookupIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
			addr, ok := hosts[host]
			if !ok {
				return nil, fmt.Errorf("tooltest: no address for %s (use tooltest.Resolve)", host)
			}
			if ap, err := netip.ParseAddrPort(addr); err == nil {
				return []netip.Addr{ap.Addr()}, nil
			}
			a, err := netip.ParseAddr(addr)
			if err != nil {
				return nil, fmt.Errorf("tooltest: address of %s: %w", host, err)
			}
			return []netip.Addr{a}, nil
		}
	}
	// Children keep to the file accessor's floor, as in the worker.
	procCfg := process.Config{TrustedPATH: process.DefaultTrustedPATH, TmpDir: t.TempDir(), Floor: scopedfs.NewFloor(c.home, nil)}
	if err := procCfg.Validate(); err != nil {
		t.Fatalf("tooltest: %v", err)
	}
	byName := map[string]string{}
	for ref, v := range c.secrets {
		byName[secrets.EnvName(secrets.DefaultEnvPrefix, ref)] = v
	}
	return pipeline.Backends{
		Secrets: secrets.NewEnv(secrets.DefaultEnvPrefix, func(name string) string { return byName[name] }),
		FS:      scopedfs.Config{Home: c.home},
		Process: procCfg, Resolver: process.NewResolver(procCfg.TrustedPATH),
		Fetch: fcfg,
	}
}

// Context returns a context that ends after d or when the test ends,
// whichever comes first: the deadline a test's blocking calls run under.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
