package process

import (
	"path/filepath"
	"slices"

	"github.com/capstanhq/capstan/internal/capability"
	"github.com/capstanhq/capstan/internal/scoped/process/launcher"
	"github.com/capstanhq/capstan/tool"
)

// Reach is what one call's children may touch besides the system files
// every child needs: the call's resolved filesystem reach and whether its
// grant includes network.
type Reach struct {
	// FS is the call's resolved fs_reach; nil reaches nothing. Read
	// prefixes become readable and executable, Write prefixes writable too.
	FS *capability.FSGrant
	// Network lets the children use TCP (Landlock cannot tell hosts apart,
	// so it is any host and port, loopback included); false denies it.
	Network bool
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

// spec returns the Landlock rules of a child running binary path in its
// private temporary directory tmp: the system files, the trusted PATH, the
// binary's own directory (before and after symlinks; the binary alone when
// that directory is /), then the call's reach.
func (r *runner) spec(path, tmp string) launcher.Spec {
	read := slices.Concat(systemRead, r.resolver.Path())
	if r.reach.Network {
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
	return launcher.Spec{Read: dedupe(read), Write: dedupe(write), Network: r.reach.Network}
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
func (r *runner) checkDir(dir string) error {
	if fs := r.reach.FS; fs != nil {
		for _, prefix := range slices.Concat(fs.Read, fs.Write) {
			if capability.Covers(prefix, dir) {
				return nil
			}
		}
	}
	return tool.Deny(tool.ErrPathNotReachable, "read not permitted for "+dir)
}
