package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"unicode"

	"sigs.k8s.io/yaml"
)

// Role is what a token may do in the console.
type Role string

// The three roles. A viewer sees everything; only an operator cancels
// calls, redrives and purges dead letters, and changes personalities; only
// an approver approves and denies held calls (the Approvals page). An
// approver otherwise sees what a viewer sees, and an operator does not
// decide held calls: the roles do not nest.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
	RoleApprover Role = "approver"
)

// MinTokenLength is the shortest token the console accepts.
const MinTokenLength = 16

// cookieName is the cookie a browser keeps its token in after /login.
const cookieName = "capstan_console"

// Token is one bearer token of the console.
type Token struct {
	// Token is the secret, at least MinTokenLength characters without
	// spaces or control characters.
	Token string `json:"token"`
	// Role is viewer, operator or approver.
	Role Role `json:"role"`
	// Name labels the token in the console and its audit log; default
	// "tokens[<index>]". An approver's name is the decider's name of its
	// decisions, which a personality's approval.approvers must list.
	Name string `json:"name"`
}

// Check reports everything that is wrong with t, naming the field; what
// names the token in the message.
func (t Token) Check(what string) error {
	var problems []string
	switch {
	case len(t.Token) < MinTokenLength:
		problems = append(problems, fmt.Sprintf("%s: token must be at least %d characters", what, MinTokenLength))
	case strings.IndexFunc(t.Token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		problems = append(problems, what+": token must not hold spaces or control characters")
	}
	switch t.Role {
	case RoleViewer, RoleOperator, RoleApprover:
	default:
		problems = append(problems, fmt.Sprintf("%s: role must be viewer, operator or approver, got %q", what, t.Role))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// LoadTokens reads a tokens file: YAML with a list "tokens" of
// {token, role, name}. Every problem is reported, naming the file and entry.
func LoadTokens(path string) ([]Token, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("console tokens file: %w", err)
	}
	var doc struct {
		Tokens []Token `json:"tokens"`
	}
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("console tokens file %s: %w", path, err)
	}
	if len(doc.Tokens) == 0 {
		return nil, fmt.Errorf("console tokens file %s: no tokens (want a list \"tokens\" of {token, role, name})", path)
	}
	var problems []string
	seen := map[string]int{}
	for i, t := range doc.Tokens {
		what := fmt.Sprintf("tokens[%d]", i)
		if t.Name == "" {
			doc.Tokens[i].Name = what
		}
		if err := t.Check(what); err != nil {
			problems = append(problems, err.Error())
		}
		if j, dup := seen[t.Token]; dup {
			problems = append(problems, fmt.Sprintf("%s: same token as tokens[%d]", what, j))
		}
		seen[t.Token] = i
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("console tokens file %s: %s", path, strings.Join(problems, "; "))
	}
	return doc.Tokens, nil
}

// identity is who makes a request.
type identity struct {
	Name string
	Role Role
}

func (id identity) operator() bool { return id.Role == RoleOperator }

func (id identity) approver() bool { return id.Role == RoleApprover }

type identityKey struct{}

func identityOf(ctx context.Context) identity {
	id, _ := ctx.Value(identityKey{}).(identity)
	return id
}

// auth maps tokens to identities; only SHA-256 hashes of the tokens are
// kept, compared in constant time.
type auth struct {
	entries []authEntry
}

type authEntry struct {
	hash [sha256.Size]byte
	id   identity
}

func newAuth(tokens []Token) *auth {
	a := &auth{}
	for _, t := range tokens {
		a.entries = append(a.entries, authEntry{hash: sha256.Sum256([]byte(t.Token)), id: identity{Name: t.Name, Role: t.Role}})
	}
	return a
}

// open reports whether the console runs without tokens (loopback only).
func (a *auth) open() bool { return len(a.entries) == 0 }

var errNoToken = errors.New("no token")

// lookup finds the identity of token.
func (a *auth) lookup(token string) (identity, bool) {
	h := sha256.Sum256([]byte(token))
	var found identity
	ok := 0
	for _, e := range a.entries {
		if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
			found, ok = e.id, 1
		}
	}
	return found, ok == 1
}

// token returns the request's token: the Authorization bearer token, else
// the cookie /login set.
func requestToken(r *http.Request) (string, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		t, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return "", errors.New("the Authorization header must be \"Bearer <token>\"")
		}
		return strings.TrimSpace(t), nil
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		return c.Value, nil
	}
	return "", errNoToken
}

// isLoopback reports whether the request comes from a loopback address.
func isLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether the request's Host names this server on
// loopback: "localhost" or a loopback address, with the port the request
// arrived on (none stands for 80). A request that did not arrive through a
// net/http server (no local address to compare with) is refused.
func loopbackHost(r *http.Request) bool {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), "80"
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	_, localPort, err := net.SplitHostPort(local.String())
	if err != nil || localPort != port {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoopbackAddr reports whether a listen address binds loopback only.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
