/* Which network interface carries traffic to the head. */
#include <fnmatch.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include "ddpenv.h"

static const char *const excluded[] = {
	"lo", "docker*", "veth*", "virbr*", "br-*", "cni*", "podman*",
	"lxcbr*", "flannel*", "cali*", NULL,
};

int ddpenv_iface_excluded(const char *name)
{
	for (const char *const *p = excluded; *p; p++)
		if (fnmatch(*p, name, 0) == 0)
			return 1;
	return 0;
}

static int any_match(const char (*pats)[DDPENV_CFG_PATLEN], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (fnmatch(pats[i], name, 0) == 0)
			return 1;
	return 0;
}

static int in_cidrs(const struct ddpenv_settings *cfg, const struct ddpenv_addr *a)
{
	for (size_t i = 0; i < cfg->ncidrs; i++)
		if (cfg->cidrs[i].addr.family == a->family &&
		    ddpenv_addr_same_subnet(&cfg->cidrs[i].addr, a, cfg->cidrs[i].prefix))
			return 1;
	return 0;
}

/* Whether this interface address may carry the step's traffic. */
static int allowed(const struct ddpenv_settings *cfg, const struct ddpenv_ifaddr *f)
{
	if (!(f->flags & IFF_UP) || (f->flags & IFF_LOOPBACK))
		return 0;
	if (any_match(cfg->exclude, cfg->nexclude, f->name))
		return 0;
	if (cfg->ninclude ? !any_match(cfg->include, cfg->ninclude, f->name) :
			    ddpenv_iface_excluded(f->name))
		return 0;
	return !cfg->ncidrs || in_cidrs(cfg, &f->addr);
}

/* "include [ib*, enp*], cidrs [10.0.0.0/8]" for messages. */
static void describe_rules(const struct ddpenv_settings *cfg, char *buf, size_t len)
{
	size_t l = 0;

	buf[0] = '\0';
	if (cfg->ninclude) {
		l += (size_t)snprintf(buf + l, len - l, "network.include [");
		for (size_t i = 0; i < cfg->ninclude && l < len; i++)
			l += (size_t)snprintf(buf + l, len - l, "%s%s", i ? ", " : "", cfg->include[i]);
		if (l < len)
			l += (size_t)snprintf(buf + l, len - l, "] (%s)", cfg->where[DDPENV_SET_NETWORK_INCLUDE]);
	}
	if (cfg->ncidrs && l < len) {
		l += (size_t)snprintf(buf + l, len - l, "%snetwork.cidrs [", l ? " and " : "");
		for (size_t i = 0; i < cfg->ncidrs && l < len; i++) {
			char a[DDPENV_ADDRSTRLEN] = "?";
			ddpenv_addr_format(&cfg->cidrs[i].addr, a, sizeof(a));
			l += (size_t)snprintf(buf + l, len - l, "%s%s/%u", i ? ", " : "", a, cfg->cidrs[i].prefix);
		}
		if (l < len)
			snprintf(buf + l, len - l, "] (%s)", cfg->where[DDPENV_SET_NETWORK_CIDRS]);
	}
}

/* "lo 127.0.0.1/8, enp1s0 10.1.0.11/24 (down)" */
static void describe_ifs(const struct ddpenv_ifaddr *ifs, size_t n, char *buf, size_t len)
{
	size_t l = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < n && l < len; i++) {
		char a[DDPENV_ADDRSTRLEN] = "?";
		ddpenv_addr_format(&ifs[i].addr, a, sizeof(a));
		l += (size_t)snprintf(buf + l, len - l, "%s%s %s/%u%s", i ? ", " : "", ifs[i].name, a,
				      ifs[i].prefix, ifs[i].flags & IFF_UP ? "" : " (down)");
	}
	if (!n)
		snprintf(buf, len, "none");
}

int ddpenv_iface_choose(const struct ddpenv_ifaddr *ifs, size_t n,
			const struct ddpenv_addr *head, const char *route_if,
			const struct ddpenv_settings *cfg,
			char *out, size_t outlen, char *how, size_t howlen,
			char *err, size_t errlen)
{
	const struct ddpenv_ifaddr *best = NULL, *route = NULL, *first = NULL;
	char hbuf[DDPENV_ADDRSTRLEN] = "?", abuf[DDPENV_ADDRSTRLEN] = "?";
	char rules[DDPENV_ERRLEN / 2], seen[DDPENV_ERRLEN / 2];
	struct ddpenv_settings defaults;
	int admin;

	if (!cfg) {
		ddpenv_settings_defaults(&defaults);
		cfg = &defaults;
	}
	admin = cfg->ninclude || cfg->ncidrs;
	ddpenv_addr_format(head, hbuf, sizeof(hbuf));
	for (size_t i = 0; i < n; i++) {
		const struct ddpenv_ifaddr *f = &ifs[i];

		if (!allowed(cfg, f))
			continue;
		if (route_if && strcmp(f->name, route_if) == 0 && !route)
			route = f;
		if (f->addr.family == head->family && !first)
			first = f;
		if (!ddpenv_addr_same_subnet(&f->addr, head, f->prefix))
			continue;
		if (!best || f->prefix > best->prefix)
			best = f;
	}
	if (best) {
		ddpenv_addr_format(&best->addr, abuf, sizeof(abuf));
		snprintf(how, howlen, "holds %s/%u, the subnet of head %s", abuf, best->prefix, hbuf);
	} else if (route) {
		best = route;
		snprintf(how, howlen, "kernel route to head %s", hbuf);
	} else if (admin && first) {
		best = first;
		describe_rules(cfg, rules, sizeof(rules));
		ddpenv_addr_format(&best->addr, abuf, sizeof(abuf));
		snprintf(how, howlen, "holds %s, allowed by %.160s (not in head %s's subnet)", abuf,
			 rules, hbuf);
	}
	if (best) {
		if (strlen(best->name) >= outlen) {
			snprintf(err, errlen, "interface name too long for a %zu-byte buffer", outlen);
			return -1;
		}
		strcpy(out, best->name);
		return 0;
	}
	describe_ifs(ifs, n, seen, sizeof(seen));
	if (admin) {
		describe_rules(cfg, rules, sizeof(rules));
		snprintf(err, errlen, "%.200s match no up interface of the head's address family here (interfaces: %.200s); set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME or fix ddp.yaml",
			 rules, seen);
		return -1;
	}
	if (route_if && *route_if) {
		snprintf(err, errlen,
			 "no interface here is in the subnet of head %s, and the route to it goes through %s, which is never used (loopback, container network or network.exclude); set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
			 hbuf, route_if);
		return -1;
	}
	snprintf(err, errlen,
		 "no interface here is in the subnet of head %s and the kernel has no route to it; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
		 hbuf);
	return -1;
}
