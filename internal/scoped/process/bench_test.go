package process_test

import (
	"context"
	"testing"

	"github.com/capstanhq/capstan/internal/scoped/process"
	"github.com/capstanhq/capstan/tool"
)

// BenchmarkRun measures the cost of starting a child, confined or not.
func BenchmarkRun(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  process.Config
	}{
		{"confined with cgroup", process.Config{}},
		{"confined", process.Config{NoCgroup: true}},
		{"unconfined with cgroup", process.Config{NoLandlock: true}},
		{"unconfined", process.Config{NoLandlock: true, NoCgroup: true}},
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
