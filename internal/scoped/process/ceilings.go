package process

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/capability"
)

// Per-call ceilings (security.md section 1): each call's children share a
// cgroup with memory, pids and cpu limits from the personality's
// process.limits. Each controller is used where the machine has it: on
// cgroup v2 (the per-call cgroup that is also killed as a whole), or, on a
// hybrid machine whose controllers are still mounted as cgroup v1
// hierarchies, in a per-call cgroup of that hierarchy that the launcher
// joins before anything else.
//
// Cgroup v2 allows controllers in a cgroup's children only when the cgroup
// itself holds no process (the "no internal processes" rule). A worker
// whose own cgroup has the controllers but does not yet enable them for
// its children moves itself into a leaf, <own cgroup>/capstan-worker, and
// enables them; the per-call cgroups are the leaf's siblings. When that is
// not possible (other processes share the worker's cgroup, or it is read
// only), no v2 ceilings apply and Sandbox says why.

// controllers are the ceilings, in the order they are reported.
var controllers = []string{"memory", "pids", "cpu"}

// workerLeaf is the cgroup v2 the worker moves itself into.
const workerLeaf = "capstan-worker"

// ceilings says where each ceiling is enforced.
type ceilings struct {
	// v2 lists the controllers enabled for the children of the per-call
	// cgroups' v2 parent.
	v2 []string
	// v1 maps a controller to the cgroup v1 directory (of this process)
	// the per-call cgroups of that hierarchy are created in.
	v1 map[string]string
}

// names lists the enforced ceilings in report order.
func (c ceilings) names() []string {
	out := []string{}
	for _, name := range controllers {
		if slices.Contains(c.v2, name) || c.v1[name] != "" {
			out = append(out, name)
		}
	}
	return out
}

// version is "v2", "v1" or "v1+v2" (a machine with some of each).
func (c ceilings) version() string {
	switch {
	case len(c.v2) > 0 && len(c.v1) > 0:
		return "v1+v2"
	case len(c.v2) > 0:
		return "v2"
	case len(c.v1) > 0:
		return "v1"
	}
	return ""
}

// probeCeilings finds where each ceiling can be enforced: in the per-call
// cgroups v2 under parent (when cgErr is nil), else in cgroup v1. The
// error names what is missing and why.
func probeCeilings(parent string, cgErr error) (ceilings, error) {
	var c ceilings
	var v2Err error
	if cgErr == nil {
		c.v2, v2Err = enableV2(parent)
	} else {
		v2Err = cgErr
	}
	missing := slices.DeleteFunc(slices.Clone(controllers), func(n string) bool { return slices.Contains(c.v2, n) })
	var v1Err error
	if len(missing) > 0 {
		c.v1, v1Err = probeV1(missing)
	}
	var lacking []string
	for _, n := range controllers {
		if !slices.Contains(c.v2, n) && c.v1[n] == "" {
			lacking = append(lacking, n)
		}
	}
	if len(lacking) == 0 {
		return c, nil
	}
	var why []string
	if v2Err != nil {
		why = append(why, "cgroup v2: "+v2Err.Error())
	}
	if v1Err != nil {
		why = append(why, "cgroup v1: "+v1Err.Error())
	}
	if len(lacking) == len(controllers) {
		return c, fmt.Errorf("no ceilings apply: children's memory, processes and CPU are not limited per call (%s)", strings.Join(why, "; "))
	}
	return c, fmt.Errorf("no %s ceiling: (%s)", strings.Join(lacking, " or "), strings.Join(why, "; "))
}

// enableV2 returns the controllers among memory, pids and cpu that the
// children of parent have, enabling them when parent has them but does
// not pass them on.
func enableV2(parent string) ([]string, error) {
	avail, err := readWords(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	want := slices.DeleteFunc(slices.Clone(controllers), func(n string) bool { return !slices.Contains(avail, n) })
	if len(want) == 0 {
		return nil, fmt.Errorf("%s has none of the memory, pids and cpu controllers", parent)
	}
	enabled, err := readWords(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, err
	}
	todo := slices.DeleteFunc(slices.Clone(want), func(n string) bool { return slices.Contains(enabled, n) })
	if len(todo) == 0 {
		return want, nil
	}
	// Leave parent's processes behind: this one moves into a leaf.
	leaf := filepath.Join(parent, workerLeaf)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", leaf, err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return nil, fmt.Errorf("move the worker into %s: %w", leaf, err)
	}
	var buf strings.Builder
	for _, n := range todo {
		buf.WriteString("+" + n + " ")
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(strings.TrimSpace(buf.String())), 0); err != nil {
		return nil, fmt.Errorf("enable %s for the children of %s (another process in it, or not delegated?): %w", strings.Join(todo, ", "), parent, err)
	}
	return want, nil
}

// readWords reads a space-separated cgroup list file.
func readWords(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// probeV1 finds, for each controller in want, this process's cgroup v1
// directory of that hierarchy, and checks a child can be created there.
func probeV1(want []string) (map[string]string, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dirs := v1Dirs(bytes.NewReader(mounts), string(own))
	out := map[string]string{}
	var errs []string
	for _, n := range want {
		dir, ok := dirs[n]
		if !ok {
			errs = append(errs, "no "+n+" hierarchy")
			continue
		}
		if err := probeV1Dir(dir); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out[n] = dir
	}
	if len(out) == 0 {
		out = nil
	}
	if len(errs) > 0 {
		return out, errors.New(strings.Join(errs, "; "))
	}
	return out, nil
}

// v1Dirs maps each cgroup v1 controller to this process's directory in its
// hierarchy, from /proc/self/mountinfo and /proc/self/cgroup.
func v1Dirs(mountinfo io.Reader, procCgroup string) map[string]string {
	paths := map[string]string{} // controller -> path in its hierarchy
	for line := range strings.Lines(procCgroup) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || parts[1] == "" {
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			paths[ctl] = parts[2]
		}
	}
	out := map[string]string{}
	sc := bufio.NewScanner(mountinfo)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 || tail[0] != "cgroup" {
			continue
		}
		root, point := unescapeMount(fields[3]), unescapeMount(fields[4])
		for _, opt := range strings.Split(tail[2], ",") {
			path, ok := paths[opt]
			if !ok || !slices.Contains(controllers, opt) {
				continue
			}
			rel, ok := strings.CutPrefix(path, root)
			if !ok || (rel != "" && root != "/" && !strings.HasPrefix(rel, "/")) {
				continue
			}
			out[opt] = filepath.Join(point, rel)
		}
	}
	return out
}

// probeV1Dir creates and removes a cgroup under dir.
func probeV1Dir(dir string) error {
	probe, err := os.MkdirTemp(dir, "capstan-probe-")
	if err != nil {
		return fmt.Errorf("create a cgroup under %s: %w", dir, err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("remove probe cgroup %s: %w", probe, err)
	}
	return nil
}

// v2Limits writes l into the cgroup v2 dir for the controllers in have.
func v2Limits(dir string, have []string, l capability.ProcessLimits) error {
	var errs []error
	write := func(file, value string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			errs = append(errs, fmt.Errorf("process: set %s: %w", file, err))
		}
	}
	if slices.Contains(have, "memory") {
		write("memory.max", strconv.FormatInt(l.MemoryBytes, 10))
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			write("memory.swap.max", "0")
		}
	}
	if slices.Contains(have, "pids") {
		write("pids.max", strconv.Itoa(l.Pids))
	}
	if slices.Contains(have, "cpu") && l.CPU > 0 {
		write("cpu.max", fmt.Sprintf("%d %d", cpuQuota(l.CPU), cpuPeriod))
	}
	return errors.Join(errs...)
}

// cpuPeriod is the CFS period the cpu ceiling is expressed in (100 ms).
const cpuPeriod = 100000

// cpuQuota is the quota per cpuPeriod of a limit of cpus CPUs.
func cpuQuota(cpus float64) int64 { return max(int64(cpus*cpuPeriod), 1000) }

// v1Limits writes l into the per-call cgroup v1 dir of controller ctl.
func v1Limits(ctl, dir string, l capability.ProcessLimits) error {
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("process: set %s: %w", file, err)
		}
		return nil
	}
	switch ctl {
	case "memory":
		n := strconv.FormatInt(l.MemoryBytes, 10)
		if err := write("memory.limit_in_bytes", n); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			return write("memory.memsw.limit_in_bytes", n)
		}
	case "pids":
		return write("pids.max", strconv.Itoa(l.Pids))
	case "cpu":
		if l.CPU > 0 {
			if err := write("cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
				return err
			}
			return write("cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPU), 10))
		}
	}
	return nil
}

// eventCount returns the value of key in a cgroup "key value" file
// (memory.events, pids.events, memory.oom_control); 0 when the file or
// key is missing.
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
