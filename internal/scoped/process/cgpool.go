package process

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"

	"github.com/capstanhq/capstan/internal/capability"
)

// Per-call cgroups are reused. Creating and removing a cgroup in each of
// its hierarchies costs more than the rest of a short child's start on a
// small machine, so when a call ends its cgroups, once killed and empty,
// go back to a pool of this process and the next call writes its own
// limits into them. A cgroup that cannot be emptied is removed instead.
// Counters the ceilings read (oom_kill, pids "max") only grow, so a call
// compares them with their values when it took the cgroup. A cgroup that
// had to be killed with cgroup.kill is not reused: the kernel would kill
// every process cloned into it afterwards. Pooled cgroups
// carry this process's owner name like fresh ones, so Sweep removes them
// after a crash.

// maxIdleCgroups bounds the pool per key.
const maxIdleCgroups = 16

// cgroupPool is the pool of idle per-call cgroups of one process.
var cgroupPool = struct {
	sync.Mutex
	// idle is keyed by poolKey.
	idle map[string][]*callCgroup
}{idle: map[string][]*callCgroup{}}

// poolKey says which cgroups a callCgroup has: its v2 parent and v1 dirs'
// parents (the cpu hierarchy is joined only by calls with a cpu limit).
func poolKey(parent string, c ceilings, l capability.ProcessLimits) string {
	var b strings.Builder
	b.WriteString(parent)
	for _, ctl := range controllers {
		if c.v1[ctl] != "" && (ctl != "cpu" || l.CPU > 0) {
			b.WriteString("|" + ctl)
		}
	}
	return b.String()
}

// acquireCgroup returns a callCgroup with the limits l: an idle one from
// the pool, or a new one.
func acquireCgroup(parent string, c ceilings, l capability.ProcessLimits) (*callCgroup, error) {
	key := poolKey(parent, c, l)
	cgroupPool.Lock()
	list := cgroupPool.idle[key]
	var cg *callCgroup
	if n := len(list); n > 0 {
		cg, cgroupPool.idle[key] = list[n-1], list[:n-1]
	}
	cgroupPool.Unlock()
	if cg == nil {
		return newCallCgroup(parent, c, l)
	}
	if err := cg.setLimits(l); err != nil {
		_ = cg.remove()
		return newCallCgroup(parent, c, l)
	}
	return cg, nil
}

// releaseCgroup kills what is left in cg and returns it to the pool when
// it is empty, else removes it.
func releaseCgroup(cg *callCgroup, key string) error {
	if err := cg.empty(); err != nil || cg.spent {
		return errors.Join(err, cg.remove())
	}
	cgroupPool.Lock()
	if len(cgroupPool.idle[key]) < maxIdleCgroups {
		cgroupPool.idle[key] = append(cgroupPool.idle[key], cg)
		cg = nil
	}
	cgroupPool.Unlock()
	if cg != nil {
		return cg.remove()
	}
	return nil
}

// setLimits writes l into cg's cgroups and records the counters' values.
func (cc *callCgroup) setLimits(l capability.ProcessLimits) error {
	var errs []error
	if cc.v2 != nil {
		errs = append(errs, v2Limits(cc.v2.dir, cc.v2ctl, l))
	}
	for ctl, dir := range cc.v1 {
		errs = append(errs, v1Limits(ctl, dir, l))
	}
	cc.baseMemory, cc.basePids = cc.counters()
	return errors.Join(errs...)
}

// empty kills every process of cc and waits (at most cgroupRemoveTimeout)
// until none is left in any of its cgroups.
func (cc *callCgroup) empty() error {
	if cc.v2 != nil {
		if err := cc.kill(); err != nil {
			return err
		}
		if err := cc.v2.waitUnpopulated(); err != nil {
			return err
		}
	}
	for _, dir := range cc.v1 {
		if err := killProcs(dir); err != nil {
			return err
		}
	}
	return nil
}

// counters returns the cumulative oom_kill and pids "max" counters of cc.
func (cc *callCgroup) counters() (memory, pids int64) {
	if cc.v2 != nil {
		memory += eventCount(filepath.Join(cc.v2.dir, "memory.events"), "oom_kill")
		pids += eventCount(filepath.Join(cc.v2.dir, "pids.events"), "max")
	}
	if d := cc.v1["memory"]; d != "" {
		memory += eventCount(filepath.Join(d, "memory.oom_control"), "oom_kill")
	}
	if d := cc.v1["pids"]; d != "" {
		pids += eventCount(filepath.Join(d, "pids.events"), "max")
	}
	return memory, pids
}

// ReleaseIdleCgroups removes every idle per-call cgroup of this process (a
// worker that stops calls it; the next call creates them again). Cgroups in
// use are not touched.
func ReleaseIdleCgroups() {
	cgroupPool.Lock()
	idle := cgroupPool.idle
	cgroupPool.idle = map[string][]*callCgroup{}
	cgroupPool.Unlock()
	for _, list := range idle {
		for _, cg := range list {
			_ = cg.remove()
		}
	}
}
