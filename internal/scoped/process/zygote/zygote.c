//go:build linux && cgo

// The zygote: a fork server that starts confined children without running
// the Go runtime in them. See zygote.go for the protocol and the contract;
// this file is the server (zygote_serve) and the child's path to execve
// (zygote_child). It uses only system calls and a few string functions:
// it runs before the Go runtime of the binary is initialised, from an ELF
// constructor, and never returns into it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "zygote.h"

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_landlock_add_rule
#define SYS_landlock_add_rule 445
#endif
#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef PR_SET_SECUREBITS
#define PR_SET_SECUREBITS 28
#endif

// struct clone_args of linux/sched.h (CLONE_ARGS_SIZE_VER2).
struct zy_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};

// A parsed request: pointers into buf, which the child inherits.
struct zy_req {
	struct zy_header h;
	char *buf;
	char **ptrs;
	char *path, *dir, *tmp, *tmpopts;
	char **argv, **envp, **cgroups;
	struct sock_filter *filter;
	int status, in, out, err, ruleset, cgroup2;
};

// struct landlock_path_beneath_attr of linux/landlock.h.
struct zy_path_beneath {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));
#define ZY_RULE_PATH_BENEATH 1

// Linux capability interface (linux/capability.h), declared here so the
// header's availability does not matter.
struct zy_cap_header { uint32_t version; int pid; };
struct zy_cap_data { uint32_t effective, permitted, inheritable; };
#define ZY_CAP_V3 0x20080522

// -------- the child, from clone to execve --------

// zy_json_escape writes s into out (size n) as a JSON string body.
static void zy_json_escape(const char *s, char *out, size_t n) {
	size_t j = 0;
	for (; *s && j + 7 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[j++] = '\\';
			out[j++] = (char)c;
		} else if (c < 0x20) {
			static const char hex[] = "0123456789abcdef";
			out[j++] = '\\'; out[j++] = 'u'; out[j++] = '0'; out[j++] = '0';
			out[j++] = hex[c >> 4]; out[j++] = hex[c & 15];
		} else {
			out[j++] = (char)c;
		}
	}
	out[j] = 0;
}

// zy_fail reports a failed step on the status channel and exits as a shell
// would: 127 when the binary does not exist, else 126.
static void __attribute__((noreturn)) zy_fail(int status, const char *step, const char *path, int err) {
	char esc[ZY_MAX_PATH * 6 + 16], msg[ZY_MAX_PATH * 6 + 128];
	esc[0] = 0;
	if (path) zy_json_escape(path, esc, sizeof esc);
	int n = snprintf(msg, sizeof msg, "{\"step\":\"%s%s%s\",\"errno\":%d}", step, path ? " " : "", esc, err);
	if (n > 0) (void)send(status, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, MSG_NOSIGNAL);
	_exit(err == ENOENT ? 127 : 126);
}

// zy_write_file writes s to path (cgroup.procs, uid_map, ...).
static int zy_write_file(const char *path, const char *s) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) return errno;
	ssize_t n = write(fd, s, strlen(s));
	int err = n < 0 ? errno : 0;
	close(fd);
	return err;
}

// zy_netns moves the child into a user and network namespace of its own
// (and a mount namespace with ZY_TMPFS in flags), maps uid and gid to
// themselves and brings loopback up.
static int zy_netns(uint32_t flags, uint32_t uid, uint32_t gid) {
	char map[64];
	if (unshare(CLONE_NEWUSER | CLONE_NEWNET | ((flags & ZY_TMPFS) ? CLONE_NEWNS : 0)) != 0) return errno;
	snprintf(map, sizeof map, "%u %u 1\n", uid, uid);
	int err = zy_write_file("/proc/self/uid_map", map);
	if (!err) err = zy_write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%u %u 1\n", gid, gid);
	if (!err) err = zy_write_file("/proc/self/gid_map", map);
	if (err) return err;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	err = 0;
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) err = errno;
	ifr.ifr_flags |= IFF_UP;
	if (!err && ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) err = errno;
	close(fd);
	return err;
}

// zy_send_fd sends body with the descriptor fd on status.
static int zy_send_fd(int status, const char *body, int fd) {
	char cbuf[CMSG_SPACE(sizeof(int))];
	memset(cbuf, 0, sizeof cbuf);
	struct iovec iov = {.iov_base = (void *)body, .iov_len = strlen(body)};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(status, &m, MSG_NOSIGNAL) < 0 ? errno : 0;
}

// zy_listener listens on 127.0.0.1:port in the child's namespace and sends
// the socket to the runner on status.
static int zy_listener(int status, unsigned port) {
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) return errno;
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0) {
		int err = errno;
		close(fd);
		return err;
	}
	int err = zy_send_fd(status, "{\"listener\":true}", fd);
	close(fd);
	return err;
}

// zy_tmpfs makes every mount of the child's mount namespace a slave, mounts
// a tmpfs with the request's options on its TMPDIR and sends an O_PATH
// descriptor of the tmpfs's root to the runner on status (as the
// launcher's mountTmp does).
static int zy_tmpfs(int status, const struct zy_req *r) {
	if (mount("", "/", NULL, MS_REC | MS_SLAVE, NULL) != 0) return errno;
	if (mount("tmpfs", r->tmp, "tmpfs", MS_NOSUID | MS_NODEV, r->tmpopts) != 0) return errno;
	int fd = open(r->tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return errno;
	int err = zy_send_fd(status, "{\"tmp\":true}", fd);
	close(fd);
	return err;
}

// zy_tmp_rule adds the rule for the root of the child's tmpfs to its
// ruleset (the launcher's addTmpRule).
static int zy_tmp_rule(const struct zy_req *r) {
	int fd = open(r->tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) return errno;
	struct zy_path_beneath pb = {.allowed_access = r->h.tmp_access, .parent_fd = fd};
	int err = syscall(SYS_landlock_add_rule, r->ruleset, ZY_RULE_PATH_BENEATH, &pb, 0) != 0 ? errno : 0;
	close(fd);
	return err;
}

// zy_drop_caps empties the thread's capability sets for good (a process
// without any capability has nothing to drop).
static int zy_drop_caps(void) {
	struct zy_cap_header h = {ZY_CAP_V3, 0};
	struct zy_cap_data d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capget, &h, d) != 0) return errno;
	if (!d[0].effective && !d[1].effective && !d[0].permitted && !d[1].permitted) return 0;
	// NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE and KEEP_CAPS, locked.
	if (prctl(PR_SET_SECUREBITS, 0x1 | 0x2 | 0x4 | 0x8 | 0x20 | 0x40 | 0x80, 0, 0, 0) != 0) return errno;
	for (int c = 0;; c++) {
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0) {
			if (errno == EINVAL) break;
			return errno;
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return errno;
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) != 0) return errno;
	return 0;
}

// zy_confine is the part of a child's confinement that depends on its
// request, after its process group, cgroups and namespaces: the proxy's
// listener, the tmpfs, its streams and directory, no_new_privs, no
// capabilities, Landlock, seccomp, and execve.
static void __attribute__((noreturn)) zy_confine(const struct zy_req *r) {
	int st = r->status;
	if (r->h.flags & ZY_PROXY) {
		int err = zy_listener(st, r->h.proxy_port);
		if (err) zy_fail(st, "network", NULL, err);
	}
	if (r->h.flags & ZY_TMPFS) {
		int err = zy_tmpfs(st, r);
		if (err) zy_fail(st, "tmp", NULL, err);
	}
	if (dup2(r->in, 0) < 0 || dup2(r->out, 1) < 0 || dup2(r->err, 2) < 0) zy_fail(st, "stdio", NULL, errno);
	// Everything else closes at execve; the status channel last of all.
	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
		for (int fd = 3; fd < 1024; fd++) fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	if (chdir(r->dir) != 0) zy_fail(st, "chdir", r->dir, errno);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) zy_fail(st, "capabilities", NULL, errno);
	int err = zy_drop_caps();
	if (err) zy_fail(st, "capabilities", NULL, err);
	if (r->h.flags & ZY_LANDLOCK) {
		if (r->h.flags & ZY_TMPFS) {
			int err = zy_tmp_rule(r);
			if (err) zy_fail(st, "landlock", NULL, err);
		}
		if (syscall(SYS_landlock_restrict_self, r->ruleset, 0) != 0) zy_fail(st, "landlock", NULL, errno);
	}
	if (r->h.flags & ZY_SECCOMP) {
		struct sock_fprog prog = {.len = (unsigned short)r->h.nfilter, .filter = r->filter};
		if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) zy_fail(st, "seccomp", NULL, errno);
	}
	execve(r->path, r->argv, r->envp);
	zy_fail(st, "exec", r->path, errno);
}

// zy_child confines a freshly cloned process as r asks (its process
// group, cgroups v1 and namespaces, then zy_confine) and executes the
// binary.
static void __attribute__((noreturn)) zy_child(int sock, const struct zy_req *r) {
	int st = r->status;
	close(sock);
	if (setpgid(0, 0) != 0) zy_fail(st, "process group", NULL, errno);
	for (char **cg = r->cgroups; *cg; cg++) {
		char path[ZY_MAX_PATH + 16];
		snprintf(path, sizeof path, "%s/cgroup.procs", *cg);
		int err = zy_write_file(path, "0");
		if (err) zy_fail(st, "cgroup", NULL, err);
	}
	if (r->h.flags & ZY_NETNS) {
		int err = zy_netns(r->h.flags, r->h.uid, r->h.gid);
		if (err) zy_fail(st, "network", NULL, err);
	}
	zy_confine(r);
}

// -------- the server --------

// zy_parse reads the request's payload from its memfd and points r into it.
static int zy_parse(struct zy_req *r, int memfd) {
	const struct zy_header *h = &r->h;
	if (h->payload > ZY_MAX_PAYLOAD || h->argc < 1 || h->argc > ZY_MAX_ITEMS || h->envc > ZY_MAX_ITEMS ||
	    h->ncgroups > 8 || h->nfilter > 4096) return EPROTO;
	size_t fsize = (size_t)h->nfilter * sizeof(struct sock_filter);
	if (fsize > h->payload) return EPROTO;
	r->buf = malloc((size_t)h->payload + 1);
	if (!r->buf) return ENOMEM;
	size_t got = 0;
	while (got < h->payload) {
		ssize_t n = pread(memfd, r->buf + got, h->payload - got, (off_t)got);
		if (n < 0 && errno == EINTR) continue;
		if (n <= 0) return n < 0 ? errno : EPROTO;
		got += (size_t)n;
	}
	r->buf[h->payload] = 0;
	// The filter sits at the end, after the strings, 8-byte aligned.
	size_t strings = h->payload - fsize;
	if (h->nfilter) {
		if (strings % 8) return EPROTO;
		r->filter = malloc(fsize);
		if (!r->filter) return ENOMEM;
		memcpy(r->filter, r->buf + strings, fsize);
	}
	// path, dir, tmp, tmp options, then argv, env and cgroups, each list
	// NULL-terminated.
	r->ptrs = malloc((4 + h->argc + 1 + h->envc + 1 + h->ncgroups + 1) * sizeof(char *));
	if (!r->ptrs) return ENOMEM;
	char *p = r->buf, *end = r->buf + strings;
	size_t k = 0;
	uint32_t counts[4] = {4, h->argc, h->envc, h->ncgroups};
	for (int list = 0; list < 4; list++) {
		if (list == 1) r->argv = r->ptrs + k;
		if (list == 2) r->envp = r->ptrs + k;
		if (list == 3) r->cgroups = r->ptrs + k;
		for (uint32_t i = 0; i < counts[list]; i++) {
			char *nul = memchr(p, 0, (size_t)(end - p));
			if (!nul) return EPROTO;
			r->ptrs[k++] = p;
			p = nul + 1;
		}
		if (list > 0) r->ptrs[k++] = NULL;
	}
	r->path = r->ptrs[0];
	r->dir = r->ptrs[1];
	r->tmp = r->ptrs[2];
	r->tmpopts = r->ptrs[3];
	if (strlen(r->path) >= ZY_MAX_PATH || strlen(r->dir) >= ZY_MAX_PATH || strlen(r->tmp) >= ZY_MAX_PATH ||
	    strlen(r->tmpopts) >= ZY_MAX_PATH) return ENAMETOOLONG;
	// A tmpfs needs the user namespace, and a place; without one, none.
	if ((h->flags & ZY_TMPFS) ? (!(h->flags & ZY_NETNS) || r->tmp[0] != '/' || ((h->flags & ZY_LANDLOCK) && !h->tmp_access))
	                          : (r->tmp[0] || r->tmpopts[0] || h->tmp_access)) return EPROTO;
	for (char **cg = r->cgroups; *cg; cg++)
		if (strlen(*cg) >= ZY_MAX_PATH) return ENAMETOOLONG;
	return 0;
}

// zy_send answers the runner: a reply or a notice (zygote.h).
static void zy_send(int sock, int kind, int pid, int err) {
	struct zy_reply rep = {.kind = kind, .pid = pid, .err = err};
	(void)send(sock, &rep, sizeof rep, MSG_NOSIGNAL);
}

// zy_recv reads one request from sock into r: its header, its
// descriptors (into fds and *nfds; the caller closes them) and its
// payload. It returns 0 when the sender is gone (end of file), -1 on a
// read error, else 1 with *err the request's error (EPROTO for a malformed
// one, or zy_parse's).
static int zy_recv(int sock, struct zy_req *r, int *fds, int *nfds, int *err) {
	memset(r, 0, sizeof *r);
	r->ruleset = r->cgroup2 = -1;
	char cbuf[CMSG_SPACE(ZY_MAX_FDS * sizeof(int))];
	struct iovec iov = {.iov_base = &r->h, .iov_len = sizeof r->h};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	ssize_t n;
	do n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	*nfds = 0;
	if (n <= 0) return n == 0 ? 0 : -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < k && *nfds < ZY_MAX_FDS; i++) memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
		}
	}
	int want = 5 + ((r->h.flags & ZY_LANDLOCK) ? 1 : 0) + ((r->h.flags & ZY_CGROUP2) ? 1 : 0);
	if ((size_t)n != sizeof r->h || r->h.magic != ZY_MAGIC || *nfds != want || (m.msg_flags & MSG_CTRUNC)) {
		*err = EPROTO;
		return 1;
	}
	int i = 5;
	r->status = fds[1]; r->in = fds[2]; r->out = fds[3]; r->err = fds[4];
	r->ruleset = (r->h.flags & ZY_LANDLOCK) ? fds[i++] : -1;
	r->cgroup2 = (r->h.flags & ZY_CGROUP2) ? fds[i++] : -1;
	*err = zy_parse(r, fds[0]);
	return 1;
}

// zy_forget wipes and frees what zy_recv allocated: a child forked later
// must find nothing of this request in its copy of the zygote's memory.
static void zy_forget(struct zy_req *r) {
	if (r->buf) explicit_bzero(r->buf, (size_t)r->h.payload + 1);
	if (r->filter) explicit_bzero(r->filter, (size_t)r->h.nfilter * sizeof(struct sock_filter));
	free(r->buf);
	free(r->ptrs);
	free(r->filter);
	r->buf = NULL;
	r->ptrs = NULL;
	r->filter = NULL;
}

// -------- the pool --------
//
// For requests with ZY_NETNS and ZY_TMPFS (every confined child where the
// machine allows user namespaces) the zygote keeps up to ZY_POOL_SIZE
// children forked ahead of demand, once such a request came. A pool child
// does at once what no request decides: it closes every descriptor but
// its channel to the zygote (so the runner's socket and the other pool
// children's channels are not in it), takes a process group of its own,
// unshares a user, network and mount namespace with the zygote's ids
// mapped to themselves and brings loopback up, says it is ready, and
// waits for one request. The zygote hands a request to a ready pool child:
// it moves the child into the call's cgroups (v2 and v1: the zygote does
// it, outside the child's namespaces), forwards the request with its
// descriptors on the channel and closes its end; the child then does
// what the request decides (zy_confine) and executes the binary. A pool
// child serves one request and never sees another's: it was forked before
// its request came (the zygote wipes each request's buffers) and receives
// only its own. It exits when its channel ends, that is when the zygote
// exits (the runner closed the socket, or died). Anything that goes wrong
// with a pool child (it died, a cgroup refused it, the forward failed)
// discards it (SIGKILL) and the request is served by a fresh clone as
// without a pool; after ZY_POOL_FAILURES discards in a row the pool stops.
// Pool children are the runner's (CLONE_PARENT) like every child: the
// zygote tells it each one's pid when it is born (ZY_POOL_BORN) and when
// it is discarded (ZY_POOL_GONE), so it reaps them.

#define ZY_POOL_FAILURES 3
#define ZY_POOL_DELAY_MS 1

struct zy_pooled {
	int pid, ch;
};
static struct zy_pooled zy_pool[ZY_POOL_SIZE];
static int zy_npool;
static int zy_pool_wanted, zy_pool_failures;
static uint32_t zy_uid, zy_gid;
// zy_nice is the zygote's nice value, which every child starts with;
// zy_renice says the zygote may give it back to a pool child that lowered
// its priority while it unshared (CAP_SYS_NICE or RLIMIT_NICE allow it).
static int zy_nice, zy_renice;

// zy_close_except closes every descriptor from 3 up but keep.
static void zy_close_except(int keep) {
	if (keep > 3 && syscall(SYS_close_range, 3, keep - 1, 0) != 0)
		for (int fd = 3; fd < keep; fd++) close(fd);
	if (syscall(SYS_close_range, keep + 1, ~0U, 0) != 0)
		for (int fd = keep + 1; fd < 1024; fd++) close(fd);
}

// zy_pool_init reads the zygote's ids and nice value, and whether it may
// raise a child's priority back to that value.
static void zy_pool_init(void) {
	zy_uid = geteuid();
	zy_gid = getegid();
	errno = 0;
	int n = getpriority(PRIO_PROCESS, 0);
	if (errno) return;
	zy_nice = n;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NICE, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)(20 - n))) zy_renice = 1;
	struct zy_cap_header h = {ZY_CAP_V3, 0};
	struct zy_cap_data d[2];
	if (syscall(SYS_capget, &h, d) == 0 && (d[0].effective & (1u << 23))) zy_renice = 1; // CAP_SYS_NICE
}

// zy_pool_child is a pool child's life: ready, then one request. While it
// unshares (CPU the call waiting for it would compete with), it runs at
// the lowest priority when the zygote can raise it back at hand-over.
static void __attribute__((noreturn)) zy_pool_child(int ch) {
	zy_close_except(ch);
	if (zy_renice && setpriority(PRIO_PROCESS, 0, 19) != 0) _exit(126);
	if (setpgid(0, 0) != 0 || zy_netns(ZY_NETNS | ZY_TMPFS, zy_uid, zy_gid) != 0) _exit(126);
	if (send(ch, "r", 1, MSG_NOSIGNAL) != 1) _exit(126);
	struct zy_req r;
	int fds[ZY_MAX_FDS], nfds, err = 0;
	if (zy_recv(ch, &r, fds, &nfds, &err) <= 0) _exit(0); // the zygote is gone
	close(ch);
	if (err) {
		if (nfds >= 2) zy_fail(fds[1], "request", NULL, err);
		_exit(126);
	}
	if ((r.h.flags & (ZY_NETNS | ZY_TMPFS | ZY_CGROUP2)) != (ZY_NETNS | ZY_TMPFS) || r.h.uid != zy_uid || r.h.gid != zy_gid)
		zy_fail(r.status, "request", NULL, EPROTO);
	zy_confine(&r);
}

// zy_pool_add forks one pool child and tells the runner its pid.
static void zy_pool_add(int sock) {
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
		zy_pool_failures++;
		return;
	}
	struct zy_clone_args ca;
	memset(&ca, 0, sizeof ca);
	ca.flags = CLONE_PARENT;
	long ret = syscall(SYS_clone3, &ca, sizeof ca);
	if (ret == 0) zy_pool_child(sv[1]);
	close(sv[1]);
	if (ret < 0) {
		close(sv[0]);
		zy_pool_failures++;
		return;
	}
	zy_pool[zy_npool++] = (struct zy_pooled){.pid = (int)ret, .ch = sv[0]};
	zy_send(sock, ZY_POOL_BORN, (int)ret, 0);
}

// zy_pool_fill forks pool children up to ZY_POOL_SIZE, once a request
// wanted one and while the pool works.
static void zy_pool_fill(int sock) {
	while (zy_pool_wanted && zy_pool_failures < ZY_POOL_FAILURES && zy_npool < ZY_POOL_SIZE) {
		int before = zy_npool;
		zy_pool_add(sock);
		if (zy_npool == before) return;
	}
}

// zy_place writes pid into the cgroup.procs of dir (dirfd, or the path
// when dirfd is -1).
static int zy_place(int dirfd, const char *dir, const char *pid) {
	char path[ZY_MAX_PATH + 16];
	int fd;
	if (dirfd >= 0) {
		fd = openat(dirfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	} else {
		snprintf(path, sizeof path, "%s/cgroup.procs", dir);
		fd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (fd < 0) return errno;
	ssize_t n = write(fd, pid, strlen(pid));
	int err = n < 0 ? errno : (size_t)n != strlen(pid) ? EIO : 0;
	close(fd);
	return err;
}

// zy_pool_take hands r (its descriptors in fds) to a ready pool child and
// returns its pid, or -1 when there is none or it was discarded.
static int zy_pool_take(int sock, const struct zy_req *r, const int *fds) {
	if (zy_npool == 0) return -1;
	// The oldest: the likeliest to be ready.
	struct zy_pooled p = zy_pool[0];
	memmove(zy_pool, zy_pool + 1, (size_t)--zy_npool * sizeof *zy_pool);
	char b = 0, pid[16];
	ssize_t n = -1;
	// Its priority back (it may still be unsharing), then ready?
	if (!zy_renice || setpriority(PRIO_PROCESS, p.pid, zy_nice) == 0) {
		do n = recv(p.ch, &b, 1, 0);
		while (n < 0 && errno == EINTR);
	}
	int ok = n == 1 && b == 'r';
	snprintf(pid, sizeof pid, "%d", p.pid);
	if (ok && r->cgroup2 >= 0) ok = zy_place(r->cgroup2, NULL, pid) == 0;
	for (char **cg = r->cgroups; ok && *cg; cg++) ok = zy_place(-1, *cg, pid) == 0;
	if (ok) {
		// The request as it came, less the cgroup v2 directory.
		struct zy_header h = r->h;
		h.flags &= ~ZY_CGROUP2;
		int nfds = 5 + ((h.flags & ZY_LANDLOCK) ? 1 : 0);
		char cbuf[CMSG_SPACE(ZY_MAX_FDS * sizeof(int))];
		memset(cbuf, 0, sizeof cbuf);
		struct iovec iov = {.iov_base = &h, .iov_len = sizeof h};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = CMSG_SPACE(nfds * sizeof(int))};
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
		ok = sendmsg(p.ch, &m, MSG_NOSIGNAL) == (ssize_t)sizeof h;
	}
	close(p.ch);
	if (!ok) {
		kill(p.pid, SIGKILL);
		zy_send(sock, ZY_POOL_GONE, p.pid, 0);
		zy_pool_failures++;
		return -1;
	}
	zy_pool_failures = 0;
	return p.pid;
}

// zy_clone starts a fresh child for r (clone3 into its cgroup v2), which
// confines itself from the start (zy_child); it returns its pid, or -1
// with *err.
static int zy_clone(int sock, const struct zy_req *r, int *err) {
	struct zy_clone_args ca;
	memset(&ca, 0, sizeof ca);
	// The child is the runner's: it reaps it.
	ca.flags = CLONE_PARENT;
	if (r->cgroup2 >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)r->cgroup2;
	}
	long ret = syscall(SYS_clone3, &ca, sizeof ca);
	if (ret == 0) zy_child(sock, r);
	if (ret < 0) {
		*err = errno;
		return -1;
	}
	return (int)ret;
}

// zy_serve answers spawn requests on sock until the runner closes it.
static void __attribute__((noreturn)) zy_serve(int sock) {
	for (;;) {
		struct zy_req r;
		int fds[ZY_MAX_FDS], nfds, err = 0, pid = -1;
		int got = zy_recv(sock, &r, fds, &nfds, &err);
		if (got == 0) _exit(0); // the runner is gone
		if (got < 0) _exit(1);
		if (!err) {
			if ((r.h.flags & (ZY_NETNS | ZY_TMPFS)) == (ZY_NETNS | ZY_TMPFS) && r.h.uid == zy_uid && r.h.gid == zy_gid) {
				zy_pool_wanted = 1;
				pid = zy_pool_take(sock, &r, fds);
			}
			if (pid < 0) pid = zy_clone(sock, &r, &err);
		}
		for (int i = 0; i < nfds; i++) close(fds[i]);
		zy_forget(&r);
		zy_send(sock, ZY_REPLY, pid, err);
		// The pool is filled once the runner had the time to take the
		// reply and wait for its child (a clone now would hold this CPU
		// while the runner waits for it), and not while another request
		// waits.
		struct pollfd pfd = {.fd = sock, .events = POLLIN};
		if (zy_pool_wanted && poll(&pfd, 1, ZY_POOL_DELAY_MS) == 0) zy_pool_fill(sock);
	}
}

// zygote_init runs before the Go runtime: in zygote mode (argv[0] is
// ZY_ARG0 and descriptor 3 a socket) it serves and never returns.
__attribute__((constructor)) static void zygote_init(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], ZY_ARG0) != 0) return;
	struct stat st;
	if (fstat(ZY_SOCK, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
	zy_pool_init();
	zy_serve(ZY_SOCK);
}
