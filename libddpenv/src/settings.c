/* The settings: defaults in one function, one parser per setting, layers. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddpenv.h"
#include "internal.h"

void ddpenv_settings_defaults(struct ddpenv_settings *s)
{
	memset(s, 0, sizeof(*s));
	s->default_backend = DDPENV_BACKEND_AUTO;
	s->allowed_backends = 1u << DDPENV_BACKEND_NCCL | 1u << DDPENV_BACKEND_GLOO;
	s->port_lo = DDPENV_PORT_LO;
	s->port_hi = DDPENV_PORT_HI;
	s->head_from = DDPENV_HEAD_AUTO;
	s->omp = DDPENV_OMP_AUTO;
	s->user_overrides = 1u << DDPENV_SET_HEAD_FROM | 1u << DDPENV_SET_PORT_RANGE |
			    1u << DDPENV_SET_NETWORK_INCLUDE | 1u << DDPENV_SET_OMP |
			    1u << DDPENV_SET_BIND;
	s->bind = DDPENV_BIND_AUTO;
	snprintf(s->nvidia_gpus, sizeof(s->nvidia_gpus), "%s", DDPENV_NVIDIA_GPUS);
	s->gres_order = DDPENV_GRES_ORDER_BUS;
	snprintf(s->topology_cache, sizeof(s->topology_cache), "%s", DDPENV_TOPO_CACHE);
	for (int k = 0; k < DDPENV_SET_COUNT; k++)
		snprintf(s->where[k], sizeof(s->where[k]), "default");
}

/* ---- one parser per setting ------------------------------------------------ */

static int set_default_backend(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (strcmp(v, "auto") == 0)
		s->default_backend = DDPENV_BACKEND_AUTO;
	else if (strcmp(v, "nccl") == 0)
		s->default_backend = DDPENV_BACKEND_NCCL;
	else if (strcmp(v, "gloo") == 0)
		s->default_backend = DDPENV_BACKEND_GLOO;
	else {
		snprintf(why, n, "'%.64s': expected auto, nccl or gloo", v);
		return -1;
	}
	return 0;
}

static int add_allowed_backend(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (strcmp(v, "nccl") == 0)
		s->allowed_backends |= 1u << DDPENV_BACKEND_NCCL;
	else if (strcmp(v, "gloo") == 0)
		s->allowed_backends |= 1u << DDPENV_BACKEND_GLOO;
	else {
		snprintf(why, n, "'%.64s': expected nccl or gloo", v);
		return -1;
	}
	return 0;
}

static int port_number(const char *v, uint16_t *out)
{
	uint32_t p;
	char e[8];

	if (ddpenv_parse_u32("", v, &p, e, sizeof(e)) < 0 || p == 0 || p > 65535)
		return -1;
	*out = (uint16_t)p;
	return 0;
}

static int set_port_range(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	const char *dash = strchr(v, '-');
	char lo[16];
	uint16_t a, b;

	if (!dash || (size_t)(dash - v) >= sizeof(lo))
		goto bad;
	memcpy(lo, v, (size_t)(dash - v));
	lo[dash - v] = '\0';
	if (port_number(lo, &a) < 0 || port_number(dash + 1, &b) < 0)
		goto bad;
	if (b < a) {
		snprintf(why, n, "'%.64s' is inverted: expected LOW-HIGH with LOW <= HIGH", v);
		return -1;
	}
	s->port_lo = a;
	s->port_hi = b;
	return 0;
bad:
	snprintf(why, n, "'%.64s': expected LOW-HIGH, two port numbers 1-65535 (an empty range is refused)", v);
	return -1;
}

static int add_cidr(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	char buf[DDPENV_CFG_PATLEN];
	const char *slash = strchr(v, '/');
	struct ddpenv_cidr c;
	uint32_t prefix;
	char e[8];

	if (strlen(v) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", v);
	if (slash)
		buf[slash - v] = '\0';
	if (ddpenv_addr_parse(buf, &c.addr) < 0)
		goto bad;
	prefix = c.addr.family == AF_INET ? 32 : 128;
	if (slash && (ddpenv_parse_u32("", slash + 1, &prefix, e, sizeof(e)) < 0 ||
		      prefix > (c.addr.family == AF_INET ? 32u : 128u)))
		goto bad;
	c.prefix = prefix;
	if (s->ncidrs >= DDPENV_CFG_LIST) {
		snprintf(why, n, "more than %d networks", DDPENV_CFG_LIST);
		return -1;
	}
	s->cidrs[s->ncidrs++] = c;
	return 0;
bad:
	snprintf(why, n, "'%.64s': expected a network such as 10.0.0.0/8 or fd00::/8", v);
	return -1;
}

static int add_pattern(char (*list)[DDPENV_CFG_PATLEN], size_t *count, const char *v,
		       char *why, size_t n)
{
	size_t len = strlen(v);

	if (len == 0 || len >= DDPENV_CFG_PATLEN) {
		snprintf(why, n, "'%.64s': expected an interface name pattern of 1-%d characters (ib*, enp*s0)",
			 v, DDPENV_CFG_PATLEN - 1);
		return -1;
	}
	for (const char *p = v; *p; p++)
		if (!isgraph((unsigned char)*p) || *p == ',') {
			snprintf(why, n, "'%.64s': expected an interface name pattern without spaces, commas or control characters",
				 v);
			return -1;
		}
	if (*count >= DDPENV_CFG_LIST) {
		snprintf(why, n, "more than %d patterns", DDPENV_CFG_LIST);
		return -1;
	}
	memcpy(list[(*count)++], v, len + 1);
	return 0;
}

static int add_include(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	return add_pattern(s->include, &s->ninclude, v, why, n);
}

static int add_exclude(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	return add_pattern(s->exclude, &s->nexclude, v, why, n);
}

static int set_head_from(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (ddpenv_head_from_parse(v, &s->head_from, why, n) < 0) {
		snprintf(why, n, "'%.64s': expected auto, name or nodeaddr", v);
		return -1;
	}
	return 0;
}

static int set_omp(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	uint32_t t;
	char e[8];

	if (strcmp(v, "auto") == 0)
		s->omp = DDPENV_OMP_AUTO;
	else if (strcmp(v, "none") == 0)
		s->omp = DDPENV_OMP_NONE;
	else if (ddpenv_parse_u32("", v, &t, e, sizeof(e)) == 0 && t >= 1 && t <= 4096) {
		s->omp = DDPENV_OMP_FIXED;
		s->omp_threads = t;
	} else {
		snprintf(why, n, "'%.64s': expected auto (the task's CPUs), none (leave unset) or a thread count 1-4096",
			 v);
		return -1;
	}
	return 0;
}

static int set_secret(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (*v && (*v != '/' || strlen(v) >= sizeof(s->rdzv_secret))) {
		snprintf(why, n, "'%.64s': expected an absolute path of a root-only file, or \"\" for none", v);
		return -1;
	}
	snprintf(s->rdzv_secret, sizeof(s->rdzv_secret), "%s", v);
	return 0;
}

static int set_bind(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	enum ddpenv_bind b;

	if (!*v || ddpenv_bind_parse(v, &b, why, n) < 0) {
		snprintf(why, n, "'%.64s': expected auto, none or strict", v);
		return -1;
	}
	s->bind = (int)b;
	return 0;
}

static int set_topology(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (*v && (*v != '/' || strlen(v) >= sizeof(s->topology))) {
		snprintf(why, n, "'%.64s': expected the absolute path of this node's hwloc XML export (lstopo --of xml), or \"\" to discover",
			 v);
		return -1;
	}
	snprintf(s->topology, sizeof(s->topology), "%s", v);
	return 0;
}

static int set_topology_cache(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	/* room for "/topology-<key>.xml" after it */
	if (*v && (*v != '/' || strlen(v) >= sizeof(s->topology_cache) - 128)) {
		snprintf(why, n, "'%.64s': expected the absolute path of a folder of root's for the discovered topology, or \"\" to discover at every step",
			 v);
		return -1;
	}
	snprintf(s->topology_cache, sizeof(s->topology_cache), "%s", v);
	return 0;
}

static int set_nvidia_gpus(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (*v && (*v != '/' || strlen(v) >= sizeof(s->nvidia_gpus))) {
		snprintf(why, n, "'%.64s': expected the absolute path of the NVIDIA driver's GPU list (%s), "
			 "or \"\" not to read it", v, DDPENV_NVIDIA_GPUS);
		return -1;
	}
	snprintf(s->nvidia_gpus, sizeof(s->nvidia_gpus), "%s", v);
	return 0;
}

static int set_gres_order(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	enum ddpenv_gres_order o;

	if (ddpenv_gres_order_parse(v, &o, why, n) < 0)
		return -1;
	s->gres_order = (int)o;
	return 0;
}

static int set_bind_nic(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	if (strcmp(v, "report") == 0)
		s->bind_nic_hca = 0;
	else if (strcmp(v, "nccl_ib_hca") == 0)
		s->bind_nic_hca = 1;
	else {
		snprintf(why, n, "'%.64s': expected report (DDP_NIC only) or nccl_ib_hca (also NCCL_IB_HCA per rank)", v);
		return -1;
	}
	return 0;
}

/* Settings a user can override have a DDP_* variable. */
const struct ddpenv_user_key ddpenv_user_keys[] = {
	{ "DDP_HEAD_FROM", DDPENV_SET_HEAD_FROM },
	{ "DDP_PORT_RANGE", DDPENV_SET_PORT_RANGE },
	{ "DDP_PORT", DDPENV_SET_PORT_RANGE },      /* after the range: it wins */
	{ "DDP_IFACE", DDPENV_SET_NETWORK_INCLUDE },
	{ "DDP_OMP_NUM_THREADS", DDPENV_SET_OMP },
	{ "DDP_BIND", DDPENV_SET_BIND },
	{ NULL, 0 },
};

static int add_user_override(struct ddpenv_settings *s, const char *v, char *why, size_t n)
{
	for (const struct ddpenv_user_key *u = ddpenv_user_keys; u->var; u++)
		if (strcmp(v, ddpenv_setting_name(u->setting)) == 0) {
			s->user_overrides |= 1u << u->setting;
			return 0;
		}
	snprintf(why, n, "'%.64s': expected head_from, port_range, network.include, omp_num_threads or bind (the settings with a DDP_* variable)",
		 v);
	return -1;
}

/* Variables the contract sets: an admin's env: list may not name them. */
static const char *const reserved[] = {
	"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
	"LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
	"ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "NCCL_SOCKET_IFNAME",
	"GLOO_SOCKET_IFNAME", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
	"GPU_DEVICE_ORDINAL", NULL,
};

int ddpenv_settings_env_set(struct ddpenv_settings *s, int which, const char *key,
			    const char *value, char *why, size_t n)
{
	size_t klen = strlen(key);
	struct ddpenv_cfg_var *v = NULL;

	if (klen == 0 || klen >= DDPENV_CFG_KEYLEN || !(isalpha((unsigned char)key[0]) || key[0] == '_'))
		goto badkey;
	for (const char *p = key; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_')
			goto badkey;
	for (const char *const *r = reserved; *r; r++)
		if (strcmp(key, *r) == 0) {
			snprintf(why, n, "'%s' is set by the contract itself: expected another variable", key);
			return -1;
		}
	if (strncmp(key, "DDP_", 4) == 0 || strncmp(key, "TORCHELASTIC_", 13) == 0) {
		snprintf(why, n, "'%.64s': DDP_* and TORCHELASTIC_* belong to the contract: expected another variable", key);
		return -1;
	}
	if (strlen(value) >= DDPENV_VALLEN) {
		snprintf(why, n, "%s: value of %zu characters: expected under %d", key, strlen(value),
			 DDPENV_VALLEN);
		return -1;
	}
	for (size_t i = 0; i < s->nenv[which]; i++)
		if (strcmp(s->env[which][i].key, key) == 0)
			v = &s->env[which][i];
	if (!v) {
		if (s->nenv[which] >= DDPENV_CFG_ENV) {
			snprintf(why, n, "more than %d variables", DDPENV_CFG_ENV);
			return -1;
		}
		v = &s->env[which][s->nenv[which]++];
	}
	memcpy(v->key, key, klen + 1);
	snprintf(v->value, sizeof(v->value), "%s", value);
	return 0;
badkey:
	snprintf(why, n, "'%.64s': expected a variable name (letters, digits, _; under %d characters)",
		 key, DDPENV_CFG_KEYLEN);
	return -1;
}

/* ---- the table ---------------------------------------------------------------- */

enum kind { SCALAR, LIST, ENV };

struct setting {
	const char *name;
	enum kind kind;
	int (*set)(struct ddpenv_settings *, const char *, char *, size_t);
};

static const struct setting table[DDPENV_SET_COUNT] = {
	[DDPENV_SET_DEFAULT_BACKEND] = { "default_backend", SCALAR, set_default_backend },
	[DDPENV_SET_ALLOWED_BACKENDS] = { "allowed_backends", LIST, add_allowed_backend },
	[DDPENV_SET_PORT_RANGE] = { "port_range", SCALAR, set_port_range },
	[DDPENV_SET_NETWORK_CIDRS] = { "network.cidrs", LIST, add_cidr },
	[DDPENV_SET_NETWORK_INCLUDE] = { "network.include", LIST, add_include },
	[DDPENV_SET_NETWORK_EXCLUDE] = { "network.exclude", LIST, add_exclude },
	[DDPENV_SET_HEAD_FROM] = { "head_from", SCALAR, set_head_from },
	[DDPENV_SET_OMP] = { "omp_num_threads", SCALAR, set_omp },
	[DDPENV_SET_ENV_NCCL] = { "env.nccl", ENV, NULL },
	[DDPENV_SET_ENV_GLOO] = { "env.gloo", ENV, NULL },
	[DDPENV_SET_RDZV_SECRET] = { "rdzv_secret", SCALAR, set_secret },
	[DDPENV_SET_USER_OVERRIDES] = { "user_overrides", LIST, add_user_override },
	[DDPENV_SET_BIND] = { "bind", SCALAR, set_bind },
	[DDPENV_SET_TOPOLOGY] = { "topology", SCALAR, set_topology },
	[DDPENV_SET_BIND_NIC] = { "bind_nic", SCALAR, set_bind_nic },
	[DDPENV_SET_NVIDIA_GPUS] = { "nvidia_gpus", SCALAR, set_nvidia_gpus },
	[DDPENV_SET_GRES_ORDER] = { "gres_order", SCALAR, set_gres_order },
	[DDPENV_SET_TOPOLOGY_CACHE] = { "topology_cache", SCALAR, set_topology_cache },
};

const char *ddpenv_setting_name(enum ddpenv_setting k)
{
	return (unsigned)k < DDPENV_SET_COUNT ? table[k].name : "?";
}

int ddpenv_setting_lookup(const char *name)
{
	for (int k = 0; k < DDPENV_SET_COUNT; k++)
		if (strcmp(name, table[k].name) == 0)
			return k;
	return -1;
}

int ddpenv_setting_is_list(int k)
{
	return table[k].kind == LIST;
}

void ddpenv_setting_clear(struct ddpenv_settings *s, int k)
{
	switch (k) {
	case DDPENV_SET_ALLOWED_BACKENDS: s->allowed_backends = 0; break;
	case DDPENV_SET_NETWORK_CIDRS: s->ncidrs = 0; break;
	case DDPENV_SET_NETWORK_INCLUDE: s->ninclude = 0; break;
	case DDPENV_SET_NETWORK_EXCLUDE: s->nexclude = 0; break;
	case DDPENV_SET_USER_OVERRIDES: s->user_overrides = 0; break;
	case DDPENV_SET_ENV_NCCL: s->nenv[0] = 0; break;
	case DDPENV_SET_ENV_GLOO: s->nenv[1] = 0; break;
	default: break;
	}
}

/* One scalar value, or one item of a list. */
int ddpenv_setting_apply(struct ddpenv_settings *s, int k, const char *v, char *why, size_t n)
{
	if (table[k].kind == ENV) {
		snprintf(why, n, "expected a mapping of variable names to values");
		return -1;
	}
	return table[k].set(s, v, why, n);
}

/* A list from one comma-separated string (plugstack.conf, DDP_IFACE);
 * "" is the empty list. */
int ddpenv_setting_apply_csv(struct ddpenv_settings *s, int k, const char *v, char *why, size_t n)
{
	char item[DDPENV_VALLEN];
	const char *p = v;

	ddpenv_setting_clear(s, k);
	if (!*v)
		return 0;
	for (;;) {
		size_t len = strcspn(p, ",");
		if (len >= sizeof(item)) {
			snprintf(why, n, "an item of %zu characters: expected under %zu", len, sizeof(item));
			return -1;
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if (table[k].set(s, item, why, n) < 0)
			return -1;
		if (!p[len])
			return 0;
		p += len + 1;
	}
}

/* Copy what src sets over dst (later layers win; env merges by name).
 * -1 with why set when the merged env lists would exceed their size. */
int ddpenv_settings_merge(struct ddpenv_settings *dst, const struct ddpenv_settings *src,
			  char *why, size_t n)
{
	int rv = 0;

	for (int k = 0; k < DDPENV_SET_COUNT; k++) {
		if (!(src->set & 1u << k))
			continue;
		dst->set |= 1u << k;
		memcpy(dst->where[k], src->where[k], sizeof(dst->where[k]));
		switch (k) {
		case DDPENV_SET_DEFAULT_BACKEND: dst->default_backend = src->default_backend; break;
		case DDPENV_SET_ALLOWED_BACKENDS: dst->allowed_backends = src->allowed_backends; break;
		case DDPENV_SET_PORT_RANGE:
			dst->port_lo = src->port_lo;
			dst->port_hi = src->port_hi;
			break;
		case DDPENV_SET_NETWORK_CIDRS:
			memcpy(dst->cidrs, src->cidrs, sizeof(dst->cidrs));
			dst->ncidrs = src->ncidrs;
			break;
		case DDPENV_SET_NETWORK_INCLUDE:
			memcpy(dst->include, src->include, sizeof(dst->include));
			dst->ninclude = src->ninclude;
			break;
		case DDPENV_SET_NETWORK_EXCLUDE:
			memcpy(dst->exclude, src->exclude, sizeof(dst->exclude));
			dst->nexclude = src->nexclude;
			break;
		case DDPENV_SET_HEAD_FROM: dst->head_from = src->head_from; break;
		case DDPENV_SET_OMP:
			dst->omp = src->omp;
			dst->omp_threads = src->omp_threads;
			break;
		case DDPENV_SET_ENV_NCCL:
		case DDPENV_SET_ENV_GLOO: {
			int w = k == DDPENV_SET_ENV_GLOO;
			for (size_t i = 0; i < src->nenv[w]; i++)
				if (ddpenv_settings_env_set(dst, w, src->env[w][i].key,
							    src->env[w][i].value, why, n) < 0) {
					char e[DDPENV_ERRLEN];
					snprintf(e, sizeof(e), "%s: %s once %s is added", ddpenv_setting_name(k),
						 why, src->where[k]);
					snprintf(why, n, "%s", e);
					rv = -1;
				}
			break;
		}
		case DDPENV_SET_RDZV_SECRET:
			memcpy(dst->rdzv_secret, src->rdzv_secret, sizeof(dst->rdzv_secret));
			break;
		case DDPENV_SET_USER_OVERRIDES: dst->user_overrides = src->user_overrides; break;
		case DDPENV_SET_BIND: dst->bind = src->bind; break;
		case DDPENV_SET_TOPOLOGY:
			memcpy(dst->topology, src->topology, sizeof(dst->topology));
			break;
		case DDPENV_SET_BIND_NIC: dst->bind_nic_hca = src->bind_nic_hca; break;
		case DDPENV_SET_NVIDIA_GPUS:
			memcpy(dst->nvidia_gpus, src->nvidia_gpus, sizeof(dst->nvidia_gpus));
			break;
		case DDPENV_SET_GRES_ORDER: dst->gres_order = src->gres_order; break;
		case DDPENV_SET_TOPOLOGY_CACHE:
			memcpy(dst->topology_cache, src->topology_cache, sizeof(dst->topology_cache));
			break;
		}
	}
	return rv;
}
