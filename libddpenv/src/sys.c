/* Asking the system: name resolution, interfaces, the routing table, a
 * kernel file's line. */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ddpenv.h"
#include "internal.h"

/* A lookup glibc's thread still works on: kept (never freed: glibc
 * writes its answer there), listed here so that it stays reachable. */
struct lookup {
	struct gaicb cb;
	struct addrinfo hints;
	char name[256];
	long long end_ns;            /* its bound, by CLOCK_MONOTONIC */
	struct lookup *next;
};
static struct lookup *kept_lookups;

static long long now_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* NAME's lookup handed to glibc's thread (getaddrinfo_a), to be answered
 * within DDPENV_LOOKUP_MS from now: NULL with err. */
static struct lookup *lookup_start(const char *name, char *err, size_t errlen)
{
	struct lookup *l = calloc(1, sizeof(*l));
	struct gaicb *list[1];
	int rc;

	if (!l || strlen(name) >= sizeof(l->name)) {
		snprintf(err, errlen, l ? "cannot resolve '%.100s...': a name of %zu characters (at most 255)" :
			 "cannot resolve '%.100s': out of memory", name, strlen(name));
		free(l);
		return NULL;
	}
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->hints.ai_family = AF_UNSPEC;
	l->hints.ai_socktype = SOCK_STREAM;
	l->cb.ar_name = l->name;
	l->cb.ar_request = &l->hints;
	list[0] = &l->cb;
	if ((rc = getaddrinfo_a(GAI_NOWAIT, list, 1, NULL)) != 0) {
		snprintf(err, errlen, "cannot resolve '%.100s': %s", name, gai_strerror(rc));
		free(l);
		return NULL;
	}
	l->end_ns = now_ns() + DDPENV_LOOKUP_MS * 1000000LL;
	return l;
}

/* A lookup given up on: freed, or left to glibc's thread until it answers
 * (its request is kept: a few hundred bytes). */
static void lookup_drop(struct lookup *l)
{
	if (gai_error(&l->cb) != EAI_INPROGRESS || gai_cancel(&l->cb) == EAI_CANCELED) {
		if (l->cb.ar_result)
			freeaddrinfo(l->cb.ar_result);
		free(l);
		return;
	}
	l->next = __atomic_load_n(&kept_lookups, __ATOMIC_RELAXED);
	while (!__atomic_compare_exchange_n(&kept_lookups, &l->next, l, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

/* L's answer, waited for until its bound whatever the resolver's own
 * timeouts (5 s a try, 2 tries, each name server: half a minute of
 * slurmstepd for a name a user's environment chose).  L is consumed.  0
 * with *res, else -1 with err. */
static int lookup_finish(struct lookup *l, struct addrinfo **res, char *err, size_t errlen)
{
	const struct gaicb *list[1] = { &l->cb };
	int rc;

	/* Until it answers or the bound is up, by this clock: gai_suspend can
	 * return 0 while the request is still in progress (glibc 2.41, 15 us
	 * after it was made, in half of ddp-env's runs of bench/resolve_scale.sh),
	 * or early for a signal. */
	while ((rc = gai_error(&l->cb)) == EAI_INPROGRESS) {
		long long ns = l->end_ns - now_ns();
		if (ns <= 0)
			break;
		struct timespec left = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
		if (gai_suspend(list, 1, &left) == 0 && gai_error(&l->cb) == EAI_INPROGRESS) {
			struct timespec nap = { 0, 100000 }; /* said done, and not: not a busy wait */
			nanosleep(&nap, NULL);
		}
	}
	if (rc == EAI_INPROGRESS) {
		snprintf(err, errlen, "cannot resolve '%.100s': no answer within %d s (the resolver's own timeouts "
			 "are longer; see /etc/resolv.conf)", l->name, DDPENV_LOOKUP_MS / 1000);
		lookup_drop(l);
		return -1;
	}
	if (rc != 0) {
		snprintf(err, errlen, "cannot resolve '%.100s': %s", l->name,
			 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		lookup_drop(l);
		return -1;
	}
	*res = l->cb.ar_result;
	free(l);
	return 0;
}

/* The lookup started ahead of its use (ddpenv_sys_lookup_ahead). */
static struct lookup *ahead;

int ddpenv_sys_lookup_ahead(const char *name, char *err, size_t errlen)
{
	struct ddpenv_addr lit;
	struct lookup *l, *old;

	if (ddpenv_addr_parse(name, &lit) == 0)
		return 0; /* a literal: nothing to look up */
	if (!(l = lookup_start(name, err, errlen)))
		return -1;
	if ((old = __atomic_exchange_n(&ahead, l, __ATOMIC_ACQ_REL)))
		lookup_drop(old);
	return 0;
}

/* One name lookup, answered within DDPENV_LOOKUP_MS of its start: the one
 * started ahead for NAME, else a new one.  One started ahead for another
 * name is dropped: it was a guess, and the guess was wrong. */
static int lookup_bounded(const char *name, struct addrinfo **res, char *err, size_t errlen)
{
	struct lookup *l = __atomic_exchange_n(&ahead, NULL, __ATOMIC_ACQ_REL);

	if (l && strcmp(l->name, name) != 0) {
		lookup_drop(l);
		l = NULL;
	}
	if (!l && !(l = lookup_start(name, err, errlen)))
		return -1;
	return lookup_finish(l, res, err, errlen);
}

int ddpenv_sys_lookup(void *ctx, const char *name, struct ddpenv_addr *out,
		      size_t max, char *err, size_t errlen)
{
	struct addrinfo *res = NULL, *ai;
	int n = 0;

	(void)ctx;
	if (lookup_bounded(name, &res, err, errlen) < 0)
		return -1;
	for (ai = res; ai && (size_t)n < max; ai = ai->ai_next) {
		struct ddpenv_addr a;
		int dup = 0;

		memset(&a, 0, sizeof(a));
		if (ai->ai_family == AF_INET) {
			a.family = AF_INET;
			a.u.v4 = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
		} else if (ai->ai_family == AF_INET6) {
			a.family = AF_INET6;
			a.u.v6 = ((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
		} else {
			continue;
		}
		for (int i = 0; i < n; i++)
			dup |= memcmp(&out[i], &a, sizeof(a)) == 0;
		if (!dup)
			out[n++] = a;
	}
	freeaddrinfo(res);
	return n;
}

static unsigned mask_len(const struct sockaddr *sa)
{
	const unsigned char *p;
	unsigned len, bits = 0;

	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		p = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
		len = 4;
	} else if (sa->sa_family == AF_INET6) {
		p = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		len = 16;
	} else {
		return 0;
	}
	for (unsigned i = 0; i < len; i++)
		for (int b = 7; b >= 0; b--) {
			if (!(p[i] & (1u << b)))
				return bits;
			bits++;
		}
	return bits;
}

int ddpenv_sys_ifaddrs(void *ctx, struct ddpenv_ifaddr **out, size_t *n,
		       char *err, size_t errlen)
{
	struct ifaddrs *ifa = NULL, *p;
	struct ddpenv_ifaddr *v;
	size_t count = 0;

	(void)ctx;
	if (getifaddrs(&ifa) < 0) {
		snprintf(err, errlen, "getifaddrs: %s", strerror(errno));
		return -1;
	}
	for (p = ifa; p; p = p->ifa_next)
		count++;
	v = calloc(count ? count : 1, sizeof(*v));
	if (!v) {
		freeifaddrs(ifa);
		snprintf(err, errlen, "out of memory listing %zu interface addresses", count);
		return -1;
	}
	count = 0;
	for (p = ifa; p; p = p->ifa_next) {
		struct ddpenv_ifaddr *f = &v[count];

		if (!p->ifa_addr || !p->ifa_name ||
		    (p->ifa_addr->sa_family != AF_INET && p->ifa_addr->sa_family != AF_INET6) ||
		    strlen(p->ifa_name) >= sizeof(f->name))
			continue;
		strcpy(f->name, p->ifa_name);
		f->flags = p->ifa_flags;
		f->prefix = mask_len(p->ifa_netmask);
		f->addr.family = p->ifa_addr->sa_family;
		if (f->addr.family == AF_INET)
			f->addr.u.v4 = ((struct sockaddr_in *)p->ifa_addr)->sin_addr;
		else
			f->addr.u.v6 = ((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr;
		count++;
	}
	freeifaddrs(ifa);
	*out = v;
	*n = count;
	return 0;
}

/* RTM_GETROUTE for dst: the kernel's own answer, bounded by a 2 s timeout. */
int ddpenv_sys_route(void *ctx, const struct ddpenv_addr *dst, char *ifname,
		     size_t len, char *err, size_t errlen)
{
	struct {
		struct nlmsghdr nh;
		struct rtmsg rt;
		char attrs[64];
	} req;
	char buf[8192];
	struct rtattr *rta;
	struct timeval tv = { .tv_sec = 2 };
	size_t alen = dst->family == AF_INET ? 4 : 16;
	int fd, oif = -1, rv = -1;
	ssize_t got;

	(void)ctx;
	memset(&req, 0, sizeof(req));
	req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
	req.nh.nlmsg_type = RTM_GETROUTE;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.nh.nlmsg_seq = 1;
	req.rt.rtm_family = (unsigned char)dst->family;
	req.rt.rtm_dst_len = (unsigned char)(alen * 8);
	rta = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.nh.nlmsg_len));
	rta->rta_type = RTA_DST;
	rta->rta_len = (unsigned short)RTA_LENGTH(alen);
	memcpy(RTA_DATA(rta), &dst->u, alen);
	req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_LENGTH(alen);

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0) {
		snprintf(err, errlen, "netlink socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (send(fd, &req, req.nh.nlmsg_len, 0) < 0) {
		snprintf(err, errlen, "netlink route request: %s", strerror(errno));
		goto out;
	}
	got = recv(fd, buf, sizeof(buf), 0);
	if (got < 0) {
		snprintf(err, errlen, "netlink route reply: %s", strerror(errno));
		goto out;
	}
	for (struct nlmsghdr *nh = (struct nlmsghdr *)buf; NLMSG_OK(nh, (size_t)got);
	     nh = NLMSG_NEXT(nh, got)) {
		if (nh->nlmsg_type == NLMSG_ERROR) {
			struct nlmsgerr *e = NLMSG_DATA(nh);
			snprintf(err, errlen, "no route: %s", strerror(-e->error));
			goto out;
		}
		if (nh->nlmsg_type != RTM_NEWROUTE)
			continue;
		struct rtmsg *rt = NLMSG_DATA(nh);
		int alen2 = (int)RTM_PAYLOAD(nh);
		for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, alen2); a = RTA_NEXT(a, alen2))
			if (a->rta_type == RTA_OIF)
				oif = *(int *)RTA_DATA(a);
	}
	if (oif < 0) {
		snprintf(err, errlen, "the kernel's route has no output interface");
		goto out;
	}
	char name[IF_NAMESIZE];
	if (!if_indextoname((unsigned)oif, name) || strlen(name) >= len) {
		snprintf(err, errlen, "interface index %d has no name", oif);
		goto out;
	}
	strcpy(ifname, name);
	rv = 0;
out:
	close(fd);
	return rv;
}

const struct ddpenv_sys ddpenv_sys_default = {
	.lookup = ddpenv_sys_lookup,
	.nodeaddr = NULL,
	.ifaddrs = ddpenv_sys_ifaddrs,
	.route = ddpenv_sys_route,
	.ctx = NULL,
};

ssize_t ddpenv_read_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	char *nl;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	if ((nl = strchr(buf, '\n')))
		*nl = '\0';
	return (ssize_t)strlen(buf);
}

ssize_t ddpenv_read_text(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;
	ssize_t n = 0;

	if (fd < 0)
		return -1;
	while (got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	if (n < 0)
		return -1;
	buf[got] = '\0';
	if (got == len - 1) {
		char *nl = strrchr(buf, '\n');
		got = nl ? (size_t)(nl + 1 - buf) : 0; /* a line cut short is left out */
		buf[got] = '\0';
	}
	return (ssize_t)got;
}
