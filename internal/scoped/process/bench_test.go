package process_test

import (
	"context"
	"slices"
	"testing"
	"time"

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

// BenchmarkRunInterleaved measures what confinement adds to a spawn on a
// loaded machine: each iteration starts `true` fully confined and
// unconfined, in alternating order, and the medians of each and of their
// difference are reported (ms per child), so both see the same load.
func BenchmarkRunInterleaved(b *testing.B) {
	confined := process.New(grant("true"), process.Reach{}, resolver, process.Config{}, nil)
	unconfined := process.New(grant("true"), process.Reach{}, resolver,
		process.Config{NoLandlock: true, NoSeccomp: true, NoNetNS: true, NoCgroup: true}, nil)
	run := func(r *process.Runner) time.Duration {
		start := time.Now()
		if _, err := r.Run(context.Background(), tool.Command{Binary: "true"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var c, u, d []float64
	i := 0
	for b.Loop() {
		var tc, tu time.Duration
		if i%2 == 0 {
			tc, tu = run(confined), run(unconfined)
		} else {
			tu, tc = run(unconfined), run(confined)
		}
		i++
		c = append(c, ms(tc))
		u = append(u, ms(tu))
		d = append(d, ms(tc-tu))
	}
	b.ReportMetric(median(c), "confined-ms")
	b.ReportMetric(median(u), "unconfined-ms")
	b.ReportMetric(median(d), "added-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median returns the median of v (which it sorts).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
