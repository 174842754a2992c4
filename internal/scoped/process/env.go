package process

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// checkEnv refuses loader variables and malformed names and values.
func (r *runner) checkEnv(extra map[string]string) error {
	names := slices.Sorted(maps.Keys(extra))
	for _, name := range names {
		upper := strings.ToUpper(name)
		if strings.HasPrefix(upper, "LD_") || strings.HasPrefix(upper, "DYLD_") {
			err := tool.Deny(tool.ErrEnvNotAllowed, name+" may not be set for a child process")
			r.denied(err)
			return err
		}
	}
	for _, name := range names {
		if name == "" || strings.ContainsAny(name, "=\x00") {
			return fmt.Errorf("process: invalid environment variable name %q", name)
		}
		if strings.ContainsRune(extra[name], 0) {
			return fmt.Errorf("process: value of environment variable %s contains NUL", name)
		}
	}
	return nil
}

// environ returns the child's environment, sorted: the base variables with
// TMPDIR tmp, then extra (checked by checkEnv), whose values win.
func (r *runner) environ(extra map[string]string, tmp string) []string {
	all := map[string]string{
		"PATH":   r.path,
		"HOME":   cmp.Or(r.home, tmp),
		"LANG":   "C.UTF-8",
		"TZ":     "UTC",
		"TMPDIR": tmp,
	}
	maps.Copy(all, extra)
	env := make([]string, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		env = append(env, name+"="+all[name])
	}
	return env
}
