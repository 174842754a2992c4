package process_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The helper modes of the attack tests: what a malicious child tries.
// Each attempt's outcome is "ok" or the error's text.

// Environment of the escape-net helper.
const (
	tcpEnv   = "CAPSTAN_ESCAPE_TCP"   // ip:port of a TCP listener outside the sandbox (the NATS port)
	udpEnv   = "CAPSTAN_ESCAPE_UDP"   // ip:port of a UDP socket outside the sandbox
	proxyEnv = "CAPSTAN_ESCAPE_PROXY" // "1": also try the egress proxy
)

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// escapeNet tries every socket that could leave the child.
func escapeNet() int {
	out := map[string]string{}
	tcp := netip.MustParseAddrPort(os.Getenv(tcpEnv))
	udp := netip.MustParseAddrPort(os.Getenv(udpEnv))
	sa := func(ap netip.AddrPort) *unix.SockaddrInet4 {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	connect := func(typ, proto int, to netip.AddrPort) error {
		fd, err := unix.Socket(unix.AF_INET, typ, proto)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, sa(to)); err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		// Connected: prove it by reading the server's first line.
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		buf := make([]byte, 64)
		n, _ := unix.Read(fd, buf)
		return fmt.Errorf("CONNECTED, read %q", buf[:max(n, 0)])
	}
	out["tcp"] = outcome(connect(unix.SOCK_STREAM, 0, tcp))
	out["mptcp"] = outcome(connect(unix.SOCK_STREAM, 262, tcp)) // IPPROTO_MPTCP
	out["udp"] = outcome(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		if err := unix.Sendto(fd, []byte("exfiltrated"), 0, sa(udp)); err != nil {
			return fmt.Errorf("sendto: %w", err)
		}
		return errors.New("SENT")
	}())
	out["udp6"] = outcome(func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM, 0)
		if err != nil {
			return fmt.Errorf("socket: %w", err)
		}
		defer unix.Close(fd)
		return errors.New("OPENED")
	}())
	// The same sockets with bits set above the 32 of the C int the kernel
	// reads: a filter that compares the whole 64-bit argument would let
	// them through.
	for name, args := range map[string][3]uintptr{
		"mptcp_high_bits": {unix.AF_INET, unix.SOCK_STREAM, 1<<32 | 262},
		"raw_high_bits":   {unix.AF_INET, 1<<32 | unix.SOCK_RAW, unix.IPPROTO_ICMP},
		"inet_high_bits":  {1<<32 | unix.AF_INET, unix.SOCK_STREAM, 0},
	} {
		fd, _, errno := unix.RawSyscall(unix.SYS_SOCKET, args[0], args[1], args[2])
		if errno != 0 {
			out[name] = errno.Error()
			continue
		}
		_ = unix.Close(int(fd))
		out[name] = "ok"
	}
	for name, args := range map[string][3]int{
		"raw":            {unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
		"raw_cloexec":    {unix.AF_INET, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.IPPROTO_RAW},
		"packet":         {unix.AF_PACKET, unix.SOCK_RAW, 0x0300},
		"packet_dgram":   {unix.AF_PACKET, unix.SOCK_DGRAM, 0x0300},
		"netlink_audit":  {unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_AUDIT},
		"vsock":          {unix.AF_VSOCK, unix.SOCK_STREAM, 0},
		"xdp":            {unix.AF_XDP, unix.SOCK_RAW, 0},
		"socketpair_ip":  {-1, 0, 0},
		"netlink_route":  {unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
		"unix_socket_ok": {unix.AF_UNIX, unix.SOCK_STREAM, 0},
	} {
		var err error
		if args[0] == -1 {
			var fds [2]int
			if fds, err = unix.Socketpair(unix.AF_INET, unix.SOCK_STREAM, 0); err == nil {
				_ = unix.Close(fds[0])
				_ = unix.Close(fds[1])
			}
		} else {
			var fd int
			if fd, err = unix.Socket(args[0], args[1], args[2]); err == nil {
				_ = unix.Close(fd)
			}
		}
		out[name] = outcome(err)
	}
	if os.Getenv(proxyEnv) == "1" {
		// Through the announced proxy, to the NATS port: the proxy refuses.
		out["proxy_connect_nats"] = outcome(func() error {
			c, err := net.DialTimeout("tcp", "127.0.0.1:3128", 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tcp, tcp)
			buf := make([]byte, 512)
			n, _ := c.Read(buf)
			return fmt.Errorf("proxy said %q", buf[:max(n, 0)])
		}())
	}
	return printJSON(out)
}

// escapeSys tries the system calls the seccomp filter refuses.
func escapeSys() int {
	out := map[string]string{}
	call := func(name string, trap uintptr, a ...uintptr) {
		var args [6]uintptr
		copy(args[:], a)
		_, _, errno := unix.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
		if errno == 0 {
			out[name] = "ok"
			return
		}
		out[name] = errno.Error()
	}
	// A process that does not exist: ESRCH if the call is let through.
	call("ptrace", unix.SYS_PTRACE, unix.PTRACE_PEEKUSR, 1<<30, 0, 0)
	call("bpf", unix.SYS_BPF, 0, 0, 0)
	call("perf_event_open", unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	call("keyctl", unix.SYS_KEYCTL, 0, 0)
	call("add_key", unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)
	call("userfaultfd", unix.SYS_USERFAULTFD, 0)
	call("io_uring_setup", unix.SYS_IO_URING_SETUP, 1, 0)
	call("mount", unix.SYS_MOUNT, 0, 0, 0, 0, 0)
	call("unshare_user", unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	call("unshare_net", unix.SYS_UNSHARE, unix.CLONE_NEWNET)
	call("setns", unix.SYS_SETNS, 0, 0)
	call("clone3", unix.SYS_CLONE3, 0, 0)
	// A clone that the filter let through would fork this Go program: the
	// copy exits at once and the parent reaps it.
	if pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0); errno != 0 {
		out["clone_newuser"] = errno.Error()
	} else if pid == 0 {
		unix.Exit(0)
	} else {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(int(pid), &ws, 0, nil)
		out["clone_newuser"] = "ok"
	}
	call("process_vm_readv", unix.SYS_PROCESS_VM_READV, uintptr(os.Getppid()), 0, 0, 0, 0, 0)
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err == nil {
		out["capabilities"] = fmt.Sprintf("%x %x %x", uint64(data[1].Effective)<<32|uint64(data[0].Effective),
			uint64(data[1].Permitted)<<32|uint64(data[0].Permitted), uint64(data[1].Inheritable)<<32|uint64(data[0].Inheritable))
	}
	return printJSON(out)
}

func printJSON(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 3
	}
	fmt.Println(string(b))
	return 0
}
