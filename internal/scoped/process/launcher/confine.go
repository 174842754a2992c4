package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// confine applies s to this process (steps 1 to 6 of the package comment).
// It returns the failed step's name with the error.
func confine(s Spec, status int) (step string, err error) {
	for _, dir := range s.Cgroups {
		if err := joinCgroup(dir); err != nil {
			return "cgroup", err
		}
	}
	if s.NetNS {
		if err := loopbackUp(); err != nil {
			return "network", err
		}
	}
	if s.Net == NetProxy {
		if err := sendListener(status); err != nil {
			return "network", err
		}
	}
	if s.Tmp != "" {
		if err := mountTmp(s.Tmp, s.TmpBytes, status); err != nil {
			return "tmp", err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return "capabilities", fmt.Errorf("set no_new_privs: %w", err)
	}
	if err := dropCapabilities(); err != nil {
		return "capabilities", err
	}
	if s.Landlock {
		if s.Tmp != "" {
			if err := addTmpRule(rulesetFD, s.Tmp); err != nil {
				return "landlock", err
			}
		}
		if err := restrictSelf(rulesetFD); err != nil {
			return "landlock", err
		}
		_ = unix.Close(rulesetFD)
	}
	if s.Seccomp {
		if err := InstallFilter(s.Net != NetNone); err != nil {
			return "seccomp", err
		}
	}
	return "", nil
}

// joinCgroup moves this process into the cgroup (v1 or v2) directory dir.
func joinCgroup(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	// "0" is the writing process, all its threads.
	_, err = f.Write([]byte("0"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("join %s: %w", dir, err)
	}
	return nil
}

// loopbackUp brings up the loopback interface of this process's network
// namespace (a new namespace has it down).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: bring up: %w", err)
	}
	return nil
}

// sendListener listens on 127.0.0.1:ProxyPort in this process's network
// namespace and sends the socket to the runner on status.
func sendListener(status int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: ProxyPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("proxy listener: bind 127.0.0.1:%d: %w", ProxyPort, err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		return fmt.Errorf("proxy listener: %w", err)
	}
	if err := sendFD(status, message{Listener: true}, fd); err != nil {
		return fmt.Errorf("proxy listener: send: %w", err)
	}
	return nil
}

// sendFD sends m with the descriptor fd on status.
func sendFD(status int, m message, fd int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return unix.Sendmsg(status, b, unix.UnixRights(fd), nil, 0)
}

// Securebits (linux/securebits.h).
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitKeepCapsLocked          = 1 << 5
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// lockedNoRoot are the securebits that keep a process without
// capabilities: uid 0 gains none at execve, and nothing can change that.
const lockedNoRoot = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
	secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked

// dropCapabilities empties this thread's capability sets for good. A
// process without any effective capability (a worker that is not root,
// outside a user namespace) has nothing to drop: its bounding set only
// matters to set-user-ID and file-capability binaries, which no_new_privs
// already neutralises.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective == 0 && data[1].Effective == 0 && data[0].Permitted == 0 && data[1].Permitted == 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedNoRoot, 0, 0, 0); err != nil {
		return fmt.Errorf("set securebits: %w", err)
	}
	for c := 0; ; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
