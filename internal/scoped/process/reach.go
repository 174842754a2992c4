package process

import (
	"context"
	"net"
	"path/filepath"
	"slices"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/tool"
)

// Reach is what one call's children may touch besides the system files
// every child needs: the call's resolved filesystem reach and whether its
// grant includes network, with the egress proxy that carries it.
type Reach struct {
	// FS is the call's resolved fs_reach; nil reaches nothing. Read
	// prefixes become readable and executable, Write prefixes writable too.
	FS *capability.FSGrant
	// Network is true when the call's grant includes network hosts. A
	// child then runs in its own network namespace and reaches those hosts
	// only through Egress, announced in HTTP_PROXY, HTTPS_PROXY, ALL_PROXY
	// and their lower-case forms; false leaves it no network at all.
	Network bool
	// Egress serves the call's egress proxy on the listener the child's
	// namespace hands back; required when Network is true.
	Egress Egress
}

// Egress is the per-call egress proxy: Serve answers proxy requests on ln
// until ctx ends or ln is closed, checking every target against the call's
// network grant, and returns when every connection it opened is closed.
type Egress interface {
	Serve(ctx context.Context, ln net.Listener) error
}

// systemRead lists what every confined child may read and execute, on top
// of its call's reach, when it exists: the directories of programs and
// shared libraries, the loader's cache and configuration, the time zone,
// the CA certificates, the name service switch configuration and the
// random devices. /etc as a whole (passwd, group, shadow, ...), /home,
// /root, /proc, /sys, /run, /var, /tmp, /opt, /srv and /mnt are not in it.
var systemRead = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/localtime", "/etc/alternatives", "/etc/nsswitch.conf",
	"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/pki/tls/certs", "/etc/pki/ca-trust/extracted",
	"/dev/random", "/dev/urandom",
}

// networkRead lists what a confined child may also read when its call's
// grant includes network: the resolver and service configuration.
var networkRead = []string{
	"/etc/resolv.conf", "/etc/hosts", "/etc/host.conf", "/etc/gai.conf",
	"/etc/services", "/etc/protocols",
}

// systemWrite lists the devices every confined child may read and write.
var systemWrite = []string{"/dev/null", "/dev/zero", "/dev/full"}

// spec returns the launcher's Spec for a child running binary path in its
// private temporary directory tmp, with network mode net: the Landlock
// rules (the system files, the trusted PATH, the binary's own directory
// before and after symlinks (the binary alone when that directory is /),
// then the call's reach), the namespace, the filter and the cgroup v1
// directories to join, and the tmpfs of tmp.
func (r *Runner) spec(path, tmp string, net launcher.Net, cgroups []string) launcher.Spec {
	read := slices.Concat(systemRead, r.resolver.Path())
	if net != launcher.NetNone {
		read = append(read, networkRead...)
	}
	read = append(read, binaryDir(path))
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		read = append(read, binaryDir(real))
	}
	write := append(slices.Clone(systemWrite), tmp)
	if r.reach.FS != nil {
		read = append(read, r.reach.FS.Read...)
		write = append(write, r.reach.FS.Write...)
	}
	s := launcher.Spec{Net: net, NetNS: r.netns, Seccomp: r.seccomp, Cgroups: cgroups}
	if r.tmpfs {
		s.Tmp, s.TmpBytes = tmp, r.limits.TmpBytes
	}
	if r.landlock {
		s.Landlock, s.Read, s.Write = true, dedupe(read), dedupe(write)
	}
	return s
}

// binaryDir is the directory of an absolute binary path, or the path
// itself when that directory is the root.
func binaryDir(path string) string {
	if dir := filepath.Dir(path); dir != "/" {
		return dir
	}
	return path
}

func dedupe(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// checkDir refuses a working directory outside the call's reach:
// "PATH_NOT_REACHABLE: read not permitted for <dir>". dir is absolute and
// clean.
func (r *Runner) checkDir(dir string) error {
	if fs := r.reach.FS; fs != nil {
		for _, prefix := range slices.Concat(fs.Read, fs.Write) {
			if capability.Covers(prefix, dir) {
				return nil
			}
		}
	}
	return tool.Deny(tool.ErrPathNotReachable, "read not permitted for "+dir)
}
