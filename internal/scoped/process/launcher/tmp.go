package launcher

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The child's TMPDIR as a tmpfs (security.md section 1, "Disk"). The
// launcher, in a user and mount namespace of its own and before Landlock
// and seccomp (which forbid mounting), mounts a tmpfs of the call's tmp
// limit over the TMPDIR the runner created. Only the child's namespace
// sees it; its pages count against the child's memory cgroup. Landlock
// skips the rules of a mount point on its way up from a file (the
// directory under a mount is hidden), so the TMPDIR's rule does not cover
// the tmpfs: the launcher adds a rule for the tmpfs's root to the ruleset
// before it restricts itself (addTmpRule), and nothing outside the tmpfs
// gains a right. The runner keeps an O_PATH descriptor of the
// tmpfs's root, which keeps the tmpfs alive after the child's namespace is
// gone, asks it after the child exited whether it is full (TmpFull), and
// closes it.

// mountTmp makes every mount of this process's mount namespace a slave
// (nothing mounted here propagates back to the host), mounts a tmpfs of
// size bytes on dir and sends an O_PATH descriptor of its root on status.
func mountTmp(dir string, size int64, status int) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mounts slaves: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, TmpOptions(size)); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the tmpfs on %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := sendFD(status, message{Tmp: true}, fd); err != nil {
		return fmt.Errorf("send the tmpfs: %w", err)
	}
	return nil
}

// TmpOptions are the mount options of a child's tmpfs of size bytes: the
// size and a root only the worker's user may enter (the zygote uses the
// same).
func TmpOptions(size int64) string {
	return "size=" + strconv.FormatInt(size, 10) + ",mode=700"
}

// TmpFull reports whether the tmpfs whose root f is (Files.Tmp) has no
// free block left: its child wrote up to the limit (and, past it, got
// ENOSPC).
func TmpFull(f *os.File) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return false, fmt.Errorf("launcher: statfs of the child's tmpfs: %w", err)
	}
	if st.Type != unix.TMPFS_MAGIC {
		return false, fmt.Errorf("launcher: the child's TMPDIR is not a tmpfs (file system type %#x)", st.Type)
	}
	return st.Bfree == 0, nil
}
