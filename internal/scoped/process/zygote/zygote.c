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
// (and a mount namespace with ZY_TMPFS), maps its ids to themselves and
// brings loopback up.
static int zy_netns(const struct zy_req *r) {
	char map[64];
	int flags = CLONE_NEWUSER | CLONE_NEWNET | ((r->h.flags & ZY_TMPFS) ? CLONE_NEWNS : 0);
	if (unshare(flags) != 0) return errno;
	snprintf(map, sizeof map, "%u %u 1\n", r->h.uid, r->h.uid);
	int err = zy_write_file("/proc/self/uid_map", map);
	if (!err) err = zy_write_file("/proc/self/setgroups", "deny");
	snprintf(map, sizeof map, "%u %u 1\n", r->h.gid, r->h.gid);
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

// zy_child confines the new process as r asks and executes the binary.
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
		int err = zy_netns(r);
		if (err) zy_fail(st, "network", NULL, err);
	}
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

// zy_reply answers one request.
static void zy_reply(int sock, int pid, int err) {
	struct zy_reply rep = {.pid = pid, .err = err};
	(void)send(sock, &rep, sizeof rep, MSG_NOSIGNAL);
}

// zy_serve answers spawn requests on sock until the runner closes it.
static void __attribute__((noreturn)) zy_serve(int sock) {
	for (;;) {
		struct zy_req r;
		memset(&r, 0, sizeof r);
		int fds[ZY_MAX_FDS];
		char cbuf[CMSG_SPACE(sizeof fds)];
		struct iovec iov = {.iov_base = &r.h, .iov_len = sizeof r.h};
		struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
		ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
		if (n == 0) _exit(0); // the runner is gone
		if (n < 0) {
			if (errno == EINTR) continue;
			_exit(1);
		}
		int nfds = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
				int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
				for (int i = 0; i < k && nfds < ZY_MAX_FDS; i++) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			}
		}
		int want = 5 + ((r.h.flags & ZY_LANDLOCK) ? 1 : 0) + ((r.h.flags & ZY_CGROUP2) ? 1 : 0);
		int err = 0, pid = -1;
		if ((size_t)n != sizeof r.h || r.h.magic != ZY_MAGIC || nfds != want || (m.msg_flags & MSG_CTRUNC)) {
			err = EPROTO;
		} else {
			int i = 5;
			r.status = fds[1]; r.in = fds[2]; r.out = fds[3]; r.err = fds[4];
			r.ruleset = (r.h.flags & ZY_LANDLOCK) ? fds[i++] : -1;
			r.cgroup2 = (r.h.flags & ZY_CGROUP2) ? fds[i++] : -1;
			err = zy_parse(&r, fds[0]);
		}
		if (!err) {
			struct zy_clone_args ca;
			memset(&ca, 0, sizeof ca);
			// The child is the runner's: it reaps it.
			ca.flags = CLONE_PARENT;
			if (r.cgroup2 >= 0) {
				ca.flags |= CLONE_INTO_CGROUP;
				ca.cgroup = (uint64_t)r.cgroup2;
			}
			long ret = syscall(SYS_clone3, &ca, sizeof ca);
			if (ret == 0) zy_child(sock, &r);
			if (ret < 0) err = errno;
			else pid = (int)ret;
		}
		for (int i = 0; i < nfds; i++) close(fds[i]);
		free(r.buf);
		free(r.ptrs);
		free(r.filter);
		zy_reply(sock, pid, err);
	}
}

// zygote_init runs before the Go runtime: in zygote mode (argv[0] is
// ZY_ARG0 and descriptor 3 a socket) it serves and never returns.
__attribute__((constructor)) static void zygote_init(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || !argv || !argv[0] || strcmp(argv[0], ZY_ARG0) != 0) return;
	struct stat st;
	if (fstat(ZY_SOCK, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
	zy_serve(ZY_SOCK);
}
