package process_test

import (
	"context"
	"testing"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// BenchmarkRun measures the cost of starting `true`, from fully confined
// (namespace, seccomp, Landlock, capabilities dropped, cgroup with
// ceilings) down to unconfined, in one run, and with a reach of "/"
// ("read root": rules carved around the floor) (docs/benchmarks.md).
func BenchmarkRun(b *testing.B) {
	all := process.Reach{FS: &capability.FSGrant{Read: []string{"/"}}}
	for _, bc := range []struct {
		name  string
		cfg   process.Config
		reach process.Reach
	}{
		{"confined", process.Config{}, process.Reach{}},
		{"confined through the launcher", process.Config{NoZygote: true}, process.Reach{}},
		{"confined, read root", process.Config{}, all},
		{"confined through the launcher, read root", process.Config{NoZygote: true}, all},
		{"confined without namespace", process.Config{NoNetNS: true}, process.Reach{}},
		{"confined without cgroup", process.Config{NoCgroup: true}, process.Reach{}},
		{"landlock only", process.Config{NoNetNS: true, NoSeccomp: true, NoCgroup: true}, process.Reach{}},
		{"unconfined with cgroup", process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true}, process.Reach{}},
		{"unconfined", process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true, NoCgroup: true}, process.Reach{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := process.New(grant("true"), bc.reach, resolver, bc.cfg, nil)
			for b.Loop() {
				if _, err := r.Run(context.Background(), tool.Command{Binary: "true"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
