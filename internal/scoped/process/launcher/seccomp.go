package launcher

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter is a second layer under the network namespace,
// Landlock and the dropped capabilities: it refuses the system calls a
// confined child has no use for and that widen what it reaches or the
// kernel surface it touches. It is assembled with elastic/go-seccomp-bpf;
// every refusal returns an errno (the child sees a failed call, never a
// signal), so programs that probe for a feature fall back.
//
// Refused, for every child:
//
//   - sockets: families other than unix, netlink (NETLINK_ROUTE only, what
//     libc's getaddrinfo and if_nameindex use) and, for a child with
//     network, IPv4 and IPv6; SOCK_RAW and SOCK_PACKET of any family but
//     netlink;
//     IPPROTO_MPTCP (Landlock restricts classic TCP only); a type or
//     protocol with bits set above the C int the kernel reads; socketpair
//     other than unix;
//   - debugging and introspection of other processes: ptrace,
//     process_vm_readv/writev, perf_event_open, kcmp, pidfd_getfd;
//   - kernel surfaces: bpf, userfaultfd, io_uring (whose operations would
//     bypass this filter), keyctl, add_key, request_key, module and kexec
//     calls, open_by_handle_at, name_to_handle_at;
//   - namespaces and mounts: clone with any CLONE_NEW* flag, clone3 (whose
//     flags a filter cannot read; ENOSYS, so libc falls back to clone),
//     unshare of namespaces, setns, mount, umount2, pivot_root, chroot and
//     the new mount API (open_tree, move_mount, fsopen, fsconfig, fsmount,
//     fspick, mount_setattr);
//   - system administration: swapon, swapoff, reboot, acct, quotactl,
//     syslog, settimeofday, clock_settime, clock_adjtime, adjtimex,
//     sethostname, setdomainname.
//
// A system call of another architecture than the worker's (i386 through
// int 0x80 on x86_64, arm32 on arm64) and the x32 ABI are refused with
// ENOSYS before the rules: go-seccomp-bpf applies its default action to a
// foreign architecture, which is "allow" for a filter like this one
// (elastic/go-seccomp-bpf#48), so the guard in front of it is ours.

// Socket constants the filter needs (stable kernel ABI).
const (
	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16
	sockRaw   = 3
	sockPkt   = 10 // SOCK_PACKET, the obsolete packet socket type
	sockFlags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC
	ipMPTCP   = 262 // IPPROTO_MPTCP
	netlinkRt = 0   // NETLINK_ROUTE
)

// nsFlags are the clone and unshare flags that create namespaces.
const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// refused are the system calls refused outright with EPERM; names the
// running architecture does not have are skipped.
var refused = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "perf_event_open", "kcmp", "pidfd_getfd",
	"bpf", "keyctl", "add_key", "request_key",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"open_by_handle_at", "name_to_handle_at",
	"setns", "mount", "umount2", "pivot_root", "chroot",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "syslog",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
}

// unsupported are refused with ENOSYS, which callers treat as "this kernel
// does not have it" and fall back from.
var unsupported = []string{"clone3", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register"}

// actionENOSYS refuses a call with ENOSYS.
const actionENOSYS = seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)

// Policy returns the filter's rules for a child with or without network,
// as a go-seccomp-bpf policy (default: allow).
func Policy(network bool) (*seccomp.Policy, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	known := func(names []string) []string {
		return slices.DeleteFunc(slices.Clone(names), func(n string) bool { _, ok := info.SyscallNames[n]; return !ok })
	}
	eq := func(argument uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: argument, Operation: seccomp.Equal, Value: v}
	}
	ne := func(argument uint32, v uint64) seccomp.Condition {
		return seccomp.Condition{Argument: argument, Operation: seccomp.NotEqual, Value: v}
	}
	var deny []seccomp.NameWithConditions
	rule := func(name string, conds ...seccomp.Condition) {
		deny = append(deny, seccomp.NameWithConditions{Name: name, Conditions: conds})
	}
	// socket(domain, type, protocol): an allow list of families.
	families := []seccomp.Condition{ne(0, afUnix), ne(0, afNetlink)}
	if network {
		families = append(families, ne(0, afInet), ne(0, afInet6))
	}
	rule("socket", families...)
	rule("socket", eq(0, afNetlink), ne(2, netlinkRt))
	// Raw and packet sockets of any family but netlink, whose sockets
	// are SOCK_RAW by convention (the family rules above limit netlink
	// to NETLINK_ROUTE).
	for _, flags := range []uint64{0, unix.SOCK_NONBLOCK, unix.SOCK_CLOEXEC, sockFlags} {
		rule("socket", ne(0, afNetlink), eq(1, sockRaw|flags))
		rule("socket", ne(0, afNetlink), eq(1, sockPkt|flags))
	}
	rule("socket", eq(2, ipMPTCP))
	// The kernel reads socket's arguments as 32-bit ints and the filter
	// sees the whole 64-bit registers: a type or protocol with bits set
	// above the int (socket(AF_INET, SOCK_STREAM, 1<<32|IPPROTO_MPTCP))
	// would slip past the Equal rules above, so no caller may set them.
	// The family rules compare with NotEqual and refuse such a family
	// already.
	rule("socket", seccomp.Condition{Argument: 1, Operation: seccomp.GreaterThan, Value: 1<<32 - 1})
	rule("socket", seccomp.Condition{Argument: 2, Operation: seccomp.GreaterThan, Value: 1<<32 - 1})
	rule("socketpair", ne(0, afUnix))
	// clone's flags are its first argument on the architectures Go
	// supports here (not s390x, where this package does not build).
	rule("clone", seccomp.Condition{Argument: 0, Operation: seccomp.BitsSet, Value: nsFlags})
	rule("unshare", seccomp.Condition{Argument: 0, Operation: seccomp.BitsSet, Value: nsFlags | unix.CLONE_NEWTIME})
	return &seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: known(refused), Action: seccomp.ActionErrno},
			{Names: known(unsupported), Action: actionENOSYS},
			{NamesWithCondtions: deny, Action: seccomp.ActionErrno},
		},
	}, nil
}

// Filter returns the assembled BPF program of the filter for a child with
// or without network: the architecture guard, then Policy(network).
func Filter(network bool) ([]unix.SockFilter, error) {
	if network {
		return filterNet()
	}
	return filterNoNet()
}

var (
	filterNet   = sync.OnceValues(func() ([]unix.SockFilter, error) { return assemble(true) })
	filterNoNet = sync.OnceValues(func() ([]unix.SockFilter, error) { return assemble(false) })
)

func assemble(network bool) ([]unix.SockFilter, error) {
	p, err := Policy(network)
	if err != nil {
		return nil, err
	}
	rules, err := p.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble policy: %w", err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(actionENOSYS)},
	}
	raw, err := bpf.Assemble(append(guard, rules...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble BPF: %w", err)
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		prog[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	return prog, nil
}

// InstallFilter installs the filter of Filter(network) on the calling
// thread, whose no_new_privs bit must be set; the thread's children and
// the program it executes inherit it.
func InstallFilter(network bool) error {
	prog, err := Filter(network)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install the filter: %w", errno)
	}
	return nil
}
