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

int ddpenv_iface_choose(const struct ddpenv_ifaddr *ifs, size_t n,
			const struct ddpenv_addr *head, const char *route_if,
			char *out, size_t outlen, char *how, size_t howlen,
			char *err, size_t errlen)
{
	const struct ddpenv_ifaddr *best = NULL;
	char hbuf[DDPENV_ADDRSTRLEN] = "?", abuf[DDPENV_ADDRSTRLEN] = "?";

	ddpenv_addr_format(head, hbuf, sizeof(hbuf));
	for (size_t i = 0; i < n; i++) {
		const struct ddpenv_ifaddr *f = &ifs[i];

		if (!(f->flags & IFF_UP) || (f->flags & IFF_LOOPBACK) ||
		    ddpenv_iface_excluded(f->name))
			continue;
		if (!ddpenv_addr_same_subnet(&f->addr, head, f->prefix))
			continue;
		if (!best || f->prefix > best->prefix)
			best = f;
	}
	if (best) {
		if (strlen(best->name) >= outlen)
			goto toolong;
		strcpy(out, best->name);
		ddpenv_addr_format(&best->addr, abuf, sizeof(abuf));
		snprintf(how, howlen, "holds %s/%u, the subnet of head %s",
			 abuf, best->prefix, hbuf);
		return 0;
	}
	if (route_if && *route_if) {
		if (ddpenv_iface_excluded(route_if)) {
			snprintf(err, errlen,
				 "no interface here is in the subnet of head %s, and the route to it goes through %s, which is never used (loopback or container network); set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
				 hbuf, route_if);
			return -1;
		}
		if (strlen(route_if) >= outlen)
			goto toolong;
		strcpy(out, route_if);
		snprintf(how, howlen, "kernel route to head %s", hbuf);
		return 0;
	}
	snprintf(err, errlen,
		 "no interface here is in the subnet of head %s and the kernel has no route to it; set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME",
		 hbuf);
	return -1;
toolong:
	snprintf(err, errlen, "interface name too long for a %zu-byte buffer", outlen);
	return -1;
}
