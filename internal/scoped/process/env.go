package process

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/tool"
)

// checkEnv refuses loader variables and malformed names and values.
func (r *Runner) checkEnv(extra map[string]string) error {
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

// proxyVars are the variables that announce the egress proxy to a child
// with network; they win over the caller's values.
var proxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"}

// proxyURL is the egress proxy as the child sees it.
var proxyURL = "http://127.0.0.1:" + strconv.Itoa(launcher.ProxyPort)

// environ returns the child's environment, sorted: the base variables with
// TMPDIR tmp, then extra (checked by checkEnv), whose values win, then,
// when proxy is true, the egress proxy's variables (proxyVars) and an
// empty NO_PROXY and no_proxy.
func (r *Runner) environ(extra map[string]string, tmp string, proxy bool) []string {
	all := map[string]string{
		"PATH":   r.path,
		"HOME":   cmp.Or(r.home, tmp),
		"LANG":   "C.UTF-8",
		"TZ":     "UTC",
		"TMPDIR": tmp,
	}
	maps.Copy(all, extra)
	if proxy {
		for _, name := range proxyVars {
			all[name] = proxyURL
		}
		all["NO_PROXY"], all["no_proxy"] = "", ""
	}
	env := make([]string, 0, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		env = append(env, name+"="+all[name])
	}
	return env
}
