package launcher_test

import (
	"testing"

	scopedfs "github.com/capstanhq/capstan/internal/scoped/fs"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
)

// BenchmarkRuleset measures building a child's ruleset, as the runner
// does for every child: the system rules alone (as before the floor bound
// children), with the floor beside them, and with a reach of "/" carved
// around it (docs/benchmarks.md).
func BenchmarkRuleset(b *testing.B) {
	if _, err := launcher.ABI(); err != nil {
		b.Skipf("needs Landlock: %v", err)
	}
	system := []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives", "/etc/nsswitch.conf",
		"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/ca-certificates.conf",
		"/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted", "/dev/random", "/dev/urandom",
		"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin"}
	write := []string{"/dev/null", "/dev/zero", "/dev/full", b.TempDir()}
	floor := append(scopedfs.NewFloor("", []string{b.TempDir()}).Paths(), "/dev")
	lift := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", write[3]}
	for _, bc := range []struct {
		name string
		spec launcher.Spec
	}{
		{"system rules, no floor", launcher.Spec{Landlock: true, Read: system, Write: write}},
		{"system rules, floor beside", launcher.Spec{Landlock: true, Read: system, Write: write, Floor: floor, Lift: lift}},
		{"read root, floor carved", launcher.Spec{Landlock: true, Read: append(system, "/"), Write: write, Floor: floor, Lift: lift}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				rs, err := launcher.Ruleset(bc.spec)
				if err != nil {
					b.Fatal(err)
				}
				_ = rs.Close()
			}
		})
	}
}
