package capability

import (
	"testing"

	"github.com/capstanhq/capstan/tool"
)

// Microbenchmarks of the per-call policy work (docs/benchmarks.md). Run
// with: go test -run XXX -bench . -benchmem ./internal/capability

// BenchmarkResolveEmpty is echo's resolution: a tool that declares nothing.
func BenchmarkResolveEmpty(b *testing.B) {
	t, p := newTool("echo"), researcher()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(t, p, CallView{Tool: "echo", SessionID: "s1", PersonalityID: "researcher"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResolveAll resolves a tool that declares every category.
func BenchmarkResolveAll(b *testing.B) {
	t := newTool("everything", withCaps(tool.Capabilities{
		Network: &tool.Network{AllowedHosts: []string{"*"}},
		Secrets: []string{"providers/*"},
		Process: &tool.Process{AllowedBinaries: []string{"*"}},
		FSReach: &tool.FSReach{Read: tool.FromPersonality(), Write: tool.FromPersonality()},
		Storage: &tool.Storage{Scope: tool.ScopeSession, Kind: "kv"},
	}))
	p := researcher()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Resolve(t, p, CallView{Tool: "everything", SessionID: "s1", PersonalityID: "researcher", WorkingDir: "/srv/shared/x"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNetworkCheck matches one request's host against a resolved
// grant: allow list, deny list and port.
func BenchmarkNetworkCheck(b *testing.B) {
	g, err := Resolve(newTool("fetch_url", withCaps(tool.Capabilities{Network: &tool.Network{AllowedHosts: []string{"*"}}})), researcher(), CallView{SessionID: "s1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, host string }{
		{"allowed", "api.github.com"},
		{"denied", "gist.github.com"},
		{"unlisted", "api.stripe.com"},
		{"idna", "BÜCHER.github.com."},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = g.Network.Check("https", tc.host, 0)
			}
		})
	}
}

// BenchmarkHostListAllows is the host matcher alone on a parsed endpoint.
func BenchmarkHostListAllows(b *testing.B) {
	l, err := ParseHostList([]string{"api.openai.com", "*.github.com", "10.1.2.0/24", "internal.example.com:8443"})
	if err != nil {
		b.Fatal(err)
	}
	e, err := ParseEndpoint("https", "raw.githubusercontent.github.com", 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if !l.Allows(e) {
			b.Fatal("not allowed")
		}
	}
}

// BenchmarkFSCheck matches a relative path against a resolved fs grant.
func BenchmarkFSCheck(b *testing.B) {
	g, err := Resolve(newTool("read_file", withCaps(tool.Capabilities{FSReach: &tool.FSReach{Read: tool.FromPersonality()}})), researcher(), CallView{SessionID: "s1"})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct{ name, path string }{
		{"inside", "notes/2026/today.md"},
		{"dotdot", "../../../etc/passwd"},
		{"absolute", "/srv/shared/reports/q3.csv"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = g.FS.Check(Read, tc.path)
			}
		})
	}
}

// BenchmarkGates runs gates 3 to 5 for an allowed call.
func BenchmarkGates(b *testing.B) {
	t, p := newTool("echo"), researcher()
	b.ReportAllocs()
	for b.Loop() {
		if ExcludeGate("echo", nil) != nil || ToolsetGate(t, p, nil) != nil || PermissionGate(t, p) != nil {
			b.Fatal("refused")
		}
	}
}
