/* A crafted system for libddpenv: name table, interface list, route. */
#ifndef DDP_FAKESYS_H
#define DDP_FAKESYS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>

#include "ddpenv.h"

struct fake_host { const char *name; const char *addrs[4]; };
struct fake_if { const char *name; const char *addr; unsigned prefix; unsigned flags; };

struct fake {
	const struct fake_host *hosts;       /* NULL-name terminated */
	const struct fake_host *nodeaddrs;   /* name -> NodeAddr (addrs[0]) */
	const struct fake_if *ifs;           /* NULL-name terminated */
	const char *route_if;                /* NULL: no route */
	int lookups;                         /* how many names were looked up */
};

static int fake_lookup(void *ctx, const char *name, struct ddpenv_addr *out,
		       size_t max, char *err, size_t errlen)
{
	struct fake *f = ctx;
	f->lookups++;
	for (const struct fake_host *h = f->hosts; h && h->name; h++) {
		if (strcmp(h->name, name))
			continue;
		size_t n = 0;
		for (; n < 4 && h->addrs[n] && n < max; n++)
			ddpenv_addr_parse(h->addrs[n], &out[n]);
		return (int)n;
	}
	snprintf(err, errlen, "cannot resolve '%s': Name or service not known", name);
	return -1;
}

static int fake_nodeaddr(void *ctx, const char *node, char *out, size_t len)
{
	struct fake *f = ctx;
	for (const struct fake_host *h = f->nodeaddrs; h && h->name; h++)
		if (!strcmp(h->name, node)) {
			snprintf(out, len, "%s", h->addrs[0]);
			return 0;
		}
	return -1;
}

static int fake_ifaddrs(void *ctx, struct ddpenv_ifaddr **out, size_t *n,
			char *err, size_t errlen)
{
	struct fake *f = ctx;
	size_t c = 0;
	(void)err; (void)errlen;
	while (f->ifs && f->ifs[c].name)
		c++;
	*out = calloc(c + 1, sizeof(**out));
	for (size_t i = 0; i < c; i++) {
		snprintf((*out)[i].name, sizeof((*out)[i].name), "%s", f->ifs[i].name);
		ddpenv_addr_parse(f->ifs[i].addr, &(*out)[i].addr);
		(*out)[i].prefix = f->ifs[i].prefix;
		(*out)[i].flags = f->ifs[i].flags;
	}
	*n = c;
	return 0;
}

static int fake_route(void *ctx, const struct ddpenv_addr *dst, char *ifname,
		      size_t len, char *err, size_t errlen)
{
	struct fake *f = ctx;
	(void)dst;
	if (!f->route_if) {
		snprintf(err, errlen, "no route: Network is unreachable");
		return -1;
	}
	snprintf(ifname, len, "%s", f->route_if);
	return 0;
}

static __attribute__((unused)) struct ddpenv_sys fake_sys(struct fake *f)
{
	struct ddpenv_sys s = { fake_lookup, fake_nodeaddr, fake_ifaddrs, fake_route, f };
	return s;
}

#define UP (IFF_UP | IFF_RUNNING)

/* Add "K=V" strings up to a NULL. */
static __attribute__((unused)) void env_add_v(struct ddpenv_env *e, va_list ap)
{
	const char *kv;

	while ((kv = va_arg(ap, const char *))) {
		char k[128];
		const char *eq = strchr(kv, '=');
		snprintf(k, sizeof(k), "%.*s", (int)(eq - kv), kv);
		ddpenv_env_set(e, k, eq + 1);
	}
}

/* env_of("K=V", ..., NULL) */
static __attribute__((unused)) void env_of(struct ddpenv_env *e, ...)
{
	va_list ap;

	ddpenv_env_init(e);
	va_start(ap, e);
	env_add_v(e, ap);
	va_end(ap);
}

static __attribute__((unused)) const char *var(const struct ddpenv_vars *v, const char *key)
{
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->v[i].key, key))
			return v->v[i].value;
	return NULL;
}

static __attribute__((unused)) int var_user(const struct ddpenv_vars *v, const char *key)
{
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->v[i].key, key))
			return v->v[i].user;
	return -1;
}


#endif
