package approval

import (
	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/protocol"
)

// GrantSummary is the reach of a call with grant g, as an approval summary
// shows it: hosts, path roots, binaries, secret refs and the KV scope. A
// capability the tool does not declare is an empty list.
func GrantSummary(g *capability.Grant) protocol.ApprovalGrant {
	s := protocol.ApprovalGrant{Hosts: []string{}, ReadPaths: []string{}, WritePaths: []string{}, Binaries: []string{},
		Secrets: []string{}, KV: []string{}}
	if g == nil {
		return s
	}
	if n := g.Network; n != nil {
		s.Hosts = append(s.Hosts, n.Hosts()...)
	}
	if f := g.FS; f != nil {
		s.ReadPaths = append(s.ReadPaths, f.Read...)
		s.WritePaths = append(s.WritePaths, f.Write...)
	}
	if b := g.Process; b != nil {
		s.Binaries = append(s.Binaries, b.Binaries()...)
	}
	if r := g.Secrets; r != nil {
		s.Secrets = append(s.Secrets, r.Refs()...)
	}
	if st := g.Storage; st != nil {
		s.KV = append(s.KV, st.ScopeID)
	}
	return s
}
