package process_test

import (
	"context"
	"testing"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// BenchmarkRun measures the cost of starting `true`, from fully confined
// (namespace, seccomp, Landlock, capabilities dropped, cgroup with
// ceilings) down to unconfined, in one run (docs/benchmarks.md).
func BenchmarkRun(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  process.Config
	}{
		{"confined", process.Config{}},
		{"confined through the launcher", process.Config{NoZygote: true}},
		{"confined without namespace", process.Config{NoNetNS: true}},
		{"confined without cgroup", process.Config{NoCgroup: true}},
		{"landlock only", process.Config{NoNetNS: true, NoSeccomp: true, NoCgroup: true}},
		{"unconfined with cgroup", process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true}},
		{"unconfined", process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true, NoCgroup: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := process.New(grant("true"), process.Reach{}, resolver, bc.cfg, nil)
			for b.Loop() {
				if _, err := r.Run(context.Background(), tool.Command{Binary: "true"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
