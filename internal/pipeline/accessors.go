package pipeline

import (
	"cmp"
	"context"
	"net"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/egress"
	"github.com/capstanhq/capstan/internal/scoped/fetch"
	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/scoped/process"
	scopedsecrets "github.com/capstanhq/capstan/internal/scoped/secrets"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/tool"
)

// Backends is what the scoped accessors of every call share.
type Backends struct {
	// Secrets is the secrets backend; nil gives no secrets accessor (a
	// tool declaring secrets is refused before, by the caller).
	Secrets secrets.Backend
	// FS configures the file accessor (home, floor).
	FS scopedfs.Config
	// Process and Resolver configure the process runner.
	Process  process.Config
	Resolver *process.Resolver
	// Fetch configures the fetcher (WrapTransport for tracing) and, but
	// for WrapTransport, the dialer of the process egress proxy (LookupIP
	// lets tests map names to loopback addresses).
	Fetch fetch.Config
	// WrapInjection wraps the secrets the fetcher injects (tracing); nil
	// uses them as they are.
	WrapInjection func(*scopedsecrets.Injection) fetch.Secrets
	// Reads makes the read records of a session (STALE_WRITE checks); nil
	// gives none.
	Reads func(session string) tool.ReadRecords
	// Storage makes the key-value accessor of a storage grant; nil gives
	// none.
	Storage func(g *capability.StorageGrant, onDeny func(error)) tool.KV
}

// Attach gives tc exactly the accessors grant g allows, built on b; every
// capability denial an accessor raises is passed to onDeny.
func Attach(tc *tool.Context, g *capability.Grant, b Backends, onDeny func(error)) {
	var sec *scopedsecrets.Accessor
	if g.Secrets != nil && b.Secrets != nil {
		sec = scopedsecrets.New(g.Secrets, b.Secrets, onDeny)
		tc.Secrets = sec
	}
	if g.Network != nil {
		var opts []fetch.Option
		if sec != nil {
			// Secrets are injected at egress, by the fetcher, to the hosts
			// secrets.send_to binds them to (security.md section 4).
			var inj fetch.Secrets = scopedsecrets.NewInjection(sec)
			if b.WrapInjection != nil {
				inj = b.WrapInjection(inj.(*scopedsecrets.Injection))
			}
			opts = append(opts, fetch.WithSecrets(inj))
		}
		tc.Fetch = fetch.New(g.Network, b.Fetch, onDeny, opts...)
	}
	// A reach that resolved to nothing is no accessor at all, so file tools
	// answer "Filesystem capability not configured" (tools.md).
	if !g.FS.Empty() {
		tc.FS = scopedfs.New(g.FS, b.FS, onDeny)
		if b.Reads != nil {
			tc.Reads = b.Reads(cmp.Or(tc.SessionKey, tc.SessionID))
		}
	}
	if g.Process != nil {
		reach := process.Reach{FS: g.FS, Network: !g.Network.Empty()}
		if reach.Network {
			// The children's egress proxy: the same grant and dial-time
			// checks as the fetch accessor; each refusal is a denial.
			dcfg := b.Fetch
			dcfg.WrapTransport = nil
			reach.Egress = egressProxy{egress.Config{Dialer: fetch.NewDialer(g.Network, dcfg, onDeny)}}
		}
		tc.Process = process.New(g.Process, reach, b.Resolver, b.Process, onDeny)
	}
	if g.Storage != nil && b.Storage != nil {
		tc.KV = b.Storage(g.Storage, onDeny)
	}
}

// egressProxy serves one call's egress proxy (process.Egress).
type egressProxy struct{ cfg egress.Config }

func (p egressProxy) Serve(ctx context.Context, ln net.Listener) error {
	return egress.Serve(ctx, ln, p.cfg)
}
