// Package console serves Capstan's operator console: a server-rendered web
// UI (html/template and htmx, embedded in the binary) that shows the pool
// live, the results of calls and their timelines, what a personality may
// touch (the same explanation as "dispatcher explain"), the dead-letter
// queue, which operators may redrive and purge, and the calls held for
// approval, which approvers approve and deny.
package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/client"
	"github.com/capstanhq/capstan/internal/bus"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/worker"
)

//go:embed templates static
var files embed.FS

// readTimeout bounds the NATS reads of one page.
const readTimeout = 10 * time.Second

// Config configures a Console.
type Config struct {
	// Client is the dispatcher client the console reads and acts through
	// (catalog, personalities, dead letters, redrive, cancel, held calls
	// and their decisions). Required.
	Client *client.Client
	// Conn is a connection to the same NATS, for the streams and buckets
	// the client does not read (results and progress tails, audit records,
	// the workers and leases buckets). Required.
	Conn *bus.Conn
	// Tokens are the accepted bearer tokens. Without any, the console
	// answers loopback clients only, each as an operator.
	Tokens []Token
	// TraceURL is the trace UI's address of a trace, with {trace_id} where
	// the id goes, e.g. http://localhost:16686/trace/{trace_id} (Jaeger);
	// empty shows trace ids without a link.
	TraceURL string
	// Local describes the in-process worker of local mode, whose slots and
	// readiness the pool view shows; nil otherwise.
	Local *LocalWorker
	// Logger receives the audit log of operator actions and errors;
	// default slog.Default().
	Logger *slog.Logger
}

// LocalWorker is an in-process worker whose details the console can read.
type LocalWorker struct {
	// ID is the worker's id, as in the workers bucket.
	ID string
	// Slots is its concurrency.
	Slots int
	// Version is what the pool view shows as its version.
	Version string
	// Readiness returns its /readyz answer.
	Readiness func(context.Context) worker.Readiness
}

// Console is the console's HTTP handler and the feed behind its live views.
type Console struct {
	cfg   Config
	log   *slog.Logger
	auth  *auth
	feed  *feed
	pages map[string]*template.Template
	mux   *http.ServeMux

	readyMu   sync.Mutex
	ready     *worker.Readiness
	readyTime time.Time

	// pools caches the catalog's tool -> pool map, kept current by Start.
	pools atomic.Pointer[map[string]string]

	// queues caches each pool's queue for the pool page.
	queues queueCache
}

// New checks cfg and builds a Console; the live views move once Start has
// been called.
func New(cfg Config) (*Console, error) {
	if cfg.Client == nil {
		return nil, errors.New("console: Config.Client is required")
	}
	if cfg.Conn == nil {
		return nil, errors.New("console: Config.Conn is required")
	}
	for i, t := range cfg.Tokens {
		if err := t.Check(fmt.Sprintf("Config.Tokens[%d]", i)); err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
	}
	if cfg.TraceURL != "" && !strings.Contains(cfg.TraceURL, "{trace_id}") {
		return nil, fmt.Errorf("console: Config.TraceURL %q must hold {trace_id}", cfg.TraceURL)
	}
	c := &Console{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), auth: newAuth(cfg.Tokens)}
	c.feed = newFeed(c.toolPools)
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	c.pages = pages
	c.routes()
	return c, nil
}

// Start starts following the NATS subjects and returns once the feed is
// subscribed; stop ends it.
func (c *Console) Start(ctx context.Context) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			changed := c.cfg.Client.CatalogChanged()
			m := c.catalogPools()
			c.pools.Store(&m)
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	s, err := c.feed.start(ctx, c.cfg.Conn)
	if err != nil {
		cancel()
		<-done
		return nil, fmt.Errorf("console: follow the pool: %w", err)
	}
	return func() { s(); cancel(); <-done }, nil
}

// ServeHTTP serves the console.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.mux.ServeHTTP(w, r) }

// toolPools maps each catalog tool to its pool, from the cache Start keeps
// current.
func (c *Console) toolPools() map[string]string {
	if m := c.pools.Load(); m != nil {
		return *m
	}
	return c.catalogPools()
}

// catalogPools reads the tool -> pool map of the client's catalog.
func (c *Console) catalogPools() map[string]string {
	entries, err := c.cfg.Client.Tools(context.Background())
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		out[e.Name] = cmp.Or(e.Pool, "default")
	}
	return out
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(http.FileServerFS(static))))
	m.HandleFunc("GET /login", c.loginPage)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.Handle("GET /{$}", c.viewer(c.poolPage))
	m.Handle("GET /events/pool", c.viewer(c.poolEvents))
	m.Handle("GET /calls", c.viewer(c.callsPage))
	m.Handle("GET /events/calls", c.viewer(c.callEvents))
	m.Handle("GET /calls/{id}", c.viewer(c.callPage))
	m.Handle("GET /events/calls/{id}", c.viewer(c.oneCallEvents))
	m.Handle("POST /calls/{id}/cancel", c.operator("cancel", c.cancelCall))
	m.Handle("GET /search", c.viewer(c.search))
	m.Handle("GET /batches/{id}", c.viewer(c.batchPage))
	m.Handle("GET /explain", c.viewer(c.explainPage))
	m.Handle("GET /personalities/{id}", c.viewer(c.personalityPage))
	m.Handle("POST /personalities", c.operator("put personality", c.putPersonality))
	m.Handle("GET /dlq", c.viewer(c.dlqPage))
	m.Handle("GET /dlq/{id}", c.viewer(c.dlqShow))
	m.Handle("POST /dlq/{id}/redrive", c.operator("redrive", c.redrive))
	m.Handle("POST /dlq/{id}/purge", c.operator("purge", c.purge))
	m.Handle("GET /approvals", c.viewer(c.approvalsPage))
	m.Handle("GET /events/approvals", c.viewer(c.approvalEvents))
	m.Handle("POST /approvals/{id}/approve", c.approver("approve", c.decide(protocol.ApprovalApproved)))
	m.Handle("POST /approvals/{id}/deny", c.approver("deny", c.decide(protocol.ApprovalDenied)))
	c.mux = m
}

func cacheFor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// authenticate returns the request's identity, or writes the refusal: 403
// for a non-loopback client of a console without tokens, 401 for a missing
// or unknown token.
func (c *Console) authenticate(w http.ResponseWriter, r *http.Request) (identity, bool) {
	if c.auth.open() {
		if !isLoopback(r) {
			http.Error(w, "forbidden: this console has no tokens configured and answers loopback clients only", http.StatusForbidden)
			return identity{}, false
		}
		if !loopbackHost(r) {
			// A page that rebinds its own name to 127.0.0.1 (DNS
			// rebinding) reaches a loopback console from the operator's
			// browser, with its own name in Host and Origin.
			http.Error(w, fmt.Sprintf("forbidden: this console has no tokens configured and answers only a Host of localhost or a loopback address with its port, not %q", r.Host), http.StatusForbidden)
			return identity{}, false
		}
		return identity{Name: "local", Role: RoleOperator}, true
	}
	tok, err := requestToken(r)
	if err == nil {
		if id, ok := c.auth.lookup(tok); ok {
			return id, true
		}
		err = errors.New("unknown token")
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="capstan console"`)
	if acceptsHTML(r) && r.Method == http.MethodGet {
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "login.html", loginData{Error: loginMessage(err)}, identity{})
		return identity{}, false
	}
	http.Error(w, "unauthorized: "+loginMessage(err), http.StatusUnauthorized)
	return identity{}, false
}

func loginMessage(err error) string {
	if errors.Is(err, errNoToken) {
		return "a token is required"
	}
	return err.Error()
}

func acceptsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html") && r.Header.Get("HX-Request") == ""
}

// viewer serves h to any authenticated identity.
func (c *Console) viewer(h func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.authenticate(w, r)
		if !ok {
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// operator serves h to operators only; everyone else gets 403. Every
// attempt is written to the audit log.
func (c *Console) operator(action string, h func(http.ResponseWriter, *http.Request)) http.Handler {
	return c.role(RoleOperator, action, h)
}

// approver serves h to approvers only (deciding held calls); everyone else,
// an operator included, gets 403. Every attempt is written to the audit log.
func (c *Console) approver(action string, h func(http.ResponseWriter, *http.Request)) http.Handler {
	return c.role(RoleApprover, action, h)
}

// role serves h to identities of role want, for a request sent from the
// console's own pages (sameOrigin); every attempt is written to the audit
// log.
func (c *Console) role(want Role, action string, h func(http.ResponseWriter, *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.authenticate(w, r)
		if !ok {
			return
		}
		if !sameOrigin(r) {
			c.audit(r.Context(), action, r.PathValue("id"), id, "refused: cross-origin request")
			http.Error(w, "forbidden: cross-origin request", http.StatusForbidden)
			return
		}
		if id.Role != want {
			c.audit(r.Context(), action, r.PathValue("id"), id, "refused: role "+string(id.Role)+" may not "+action)
			msg := fmt.Sprintf("forbidden: %s needs the %s role; token %s has role %s", action, want, id.Name, id.Role)
			if want == RoleApprover && c.auth.open() {
				msg += " (a console without tokens has no approver: give it a tokens file with a token of role approver)"
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// sameOrigin refuses a browser request sent from another site (a form
// posted by another page with the console's cookie).
func sameOrigin(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" || r.Header.Get("Authorization") != "" {
		return true // not a browser form, or a bearer token no other site can send
	}
	_, host, _ := strings.Cut(o, "://")
	return host == r.Host
}

// audit writes one operator action to the log: who, what, on which call
// or dead letter, and the outcome. Tokens never appear.
func (c *Console) audit(ctx context.Context, action, target string, id identity, outcome string) {
	c.log.InfoContext(ctx, "console action", "action", action, "target", target, "by", id.Name, "role", string(id.Role), "outcome", outcome)
}

type loginData struct {
	Error string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "login.html", loginData{}, identity{})
}

// login checks the posted token and keeps it in an HttpOnly, SameSite=Strict
// cookie.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := c.auth.lookup(tok); !ok || c.auth.open() {
		w.WriteHeader(http.StatusUnauthorized)
		msg := "unknown token"
		if c.auth.open() {
			msg = "this console has no tokens: it answers loopback clients without one"
		}
		c.render(w, r, "login.html", loginData{Error: msg}, identity{})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// readCtx bounds the NATS reads of one page.
func readCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), readTimeout)
}

// localReadiness returns the local worker's readiness, at most 5 s old.
func (c *Console) localReadiness(ctx context.Context) *worker.Readiness {
	l := c.cfg.Local
	if l == nil || l.Readiness == nil {
		return nil
	}
	c.readyMu.Lock()
	defer c.readyMu.Unlock()
	if c.ready == nil || time.Since(c.readyTime) > 5*time.Second {
		rd := l.Readiness(ctx)
		c.ready, c.readyTime = &rd, time.Now()
	}
	return c.ready
}
