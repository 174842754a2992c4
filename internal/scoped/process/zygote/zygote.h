// Shared between zygote.c and the Go side (zygote.go): the request and
// reply of the zygote protocol.
#ifndef CAPSTAN_ZYGOTE_H
#define CAPSTAN_ZYGOTE_H

#include <stdint.h>

#define ZY_ARG0 "capstan-sandbox-zygote"
#define ZY_SOCK 3
#define ZY_MAGIC 0x43535a31u // "CSZ1"
#define ZY_MAX_FDS 8
#define ZY_MAX_PATH 4096
#define ZY_MAX_ITEMS 65536
#define ZY_MAX_PAYLOAD (64u << 20)

// Request flags.
#define ZY_NETNS 0x1u    // a user and network namespace of its own
#define ZY_PROXY 0x2u    // listen on 127.0.0.1:proxy_port and send the socket back
#define ZY_LANDLOCK 0x4u // restrict with the ruleset descriptor
#define ZY_SECCOMP 0x8u  // install the filter of the payload
#define ZY_CGROUP2 0x10u // start in the cgroup v2 of the descriptor
#define ZY_TMPFS 0x20u   // a mount namespace too, and a tmpfs on tmp (needs ZY_NETNS)

// zy_header is the request message; its descriptors, in order: the
// payload memfd, the status channel, stdin, stdout, stderr, then the
// Landlock ruleset (ZY_LANDLOCK) and the cgroup v2 directory (ZY_CGROUP2).
// The payload holds NUL-terminated strings (path, dir, tmp, tmp mount
// options (both empty without ZY_TMPFS), argv, env, cgroups v1) and,
// 8-byte aligned at its end, nfilter sock_filter.
// tmp_access is the Landlock access the child's ruleset gives the root of
// its tmpfs (ZY_TMPFS with ZY_LANDLOCK): the TMPDIR's own rule does not
// cover what is mounted over it.
struct zy_header {
	uint32_t magic, flags, uid, gid, proxy_port;
	uint32_t argc, envc, ncgroups, nfilter, payload;
	uint64_t tmp_access;
};

// Pool: the zygote keeps up to ZY_POOL_SIZE children forked ahead of
// demand for requests with ZY_NETNS and ZY_TMPFS (see zygote.c).
#define ZY_POOL_SIZE 4

// Kinds of the zygote's messages to the runner.
#define ZY_REPLY 0     // the answer to the request: pid, or err (an errno) and -1
#define ZY_POOL_BORN 1 // pid is a pool child: the runner's own child, not yet handed over
#define ZY_POOL_GONE 2 // pid, a pool child, was discarded unused (killed): reap it

// zy_reply is one message of the zygote to the runner. Before the reply
// to a request come the notices (ZY_POOL_*) sent since the last one.
struct zy_reply {
	int32_t kind, pid, err;
};

#endif
