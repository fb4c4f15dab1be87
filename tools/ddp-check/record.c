/* ddp-check's records on the wire: "key=value" lines, one field each, so
 * a rank of a newer ddp-check adds fields without breaking an older one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

const char *const ck_env_names[CK_NENV] = {
	"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
	"LOCAL_WORLD_SIZE", "NODE_RANK",
	"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES", "DDP_GPU_BUSID",
	DDPENV_SLURM_CVD, "SLURM_STEP_GPUS", "DDP_BIND_POLICY", "DDP_BACKEND", "SLURM_NODEID",
	"SLURM_SHARDS_ON_NODE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", DDPENV_SLURM_STEP_GPUS,
	"NCCL_IB_DISABLE", "NCCL_NET", "OMP_NUM_THREADS", "DDP_NIC", "NCCL_IB_HCA",
};

struct out {
	char *buf;
	size_t len, off;
	int over;
};

static void put(struct out *o, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void put(struct out *o, const char *key, const char *fmt, ...)
{
	char v[CK_MSG + 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	for (char *p = v; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	int n = snprintf(o->buf + o->off, o->off < o->len ? o->len - o->off : 0, "%s=%s\n", key, v);
	if (n < 0 || o->off + (size_t)n >= o->len) {
		o->over = 1;
		return;
	}
	o->off += (size_t)n;
}

static int done(struct out *o)
{
	return o->over ? -1 : (int)o->off;
}

/* Call fn(ctx, key, value) for each line; keys and values are copied. */
static void each_line(const char *buf, size_t len, void (*fn)(void *, const char *, const char *),
		      void *ctx)
{
	size_t i = 0;
	while (i < len) {
		size_t j = i;
		while (j < len && buf[j] != '\n')
			j++;
		char line[CK_MSG + 128];
		size_t l = j - i < sizeof(line) - 1 ? j - i : sizeof(line) - 1;
		memcpy(line, buf + i, l);
		line[l] = 0;
		char *eq = strchr(line, '=');
		if (eq) {
			*eq = 0;
			fn(ctx, line, eq + 1);
		}
		i = j + 1;
	}
}

#define STR(dst, src) snprintf(dst, sizeof(dst), "%s", src)

/* The GPU's health: its numbers on one line, in this order. */
static void ck_gh_encode(struct out *o, const struct ck_gpu_health *g)
{
	put(o, "gh", "%d %d %lld %lld %d %d %d %d %d %d %d %d %llu %d %d %d %d %d %d", g->have, g->cuda, g->ecc_vol,
	    g->ecc_agg, g->retired_sbe, g->retired_dbe, g->retired_pending, g->remap_corr, g->remap_unc,
	    g->remap_pending, g->remap_failed, g->persistence, g->reasons, g->sm_mhz, g->sm_max_mhz, g->power_mw,
	    g->limit_mw, g->default_limit_mw, g->nxid);
	put(o, "gh_err", "%s", g->err);
	put(o, "gh_driver", "%s", g->driver);
	put(o, "gh_xids", "%s", g->xids);
	put(o, "gh_xid_err", "%s", g->xid_err);
	put(o, "gh_nvl", "%d %lld %lld %lld", g->nvlinks, g->nvl_recovery, g->nvl_crc, g->nvl_replay);
	put(o, "gh_p2p", "%s", g->p2p);
}

static void gh_field(struct ck_gpu_health *g, const char *k, const char *v)
{
	if (!strcmp(k, "gh")) {
		if (sscanf(v, "%d %d %lld %lld %d %d %d %d %d %d %d %d %llu %d %d %d %d %d %d", &g->have, &g->cuda,
			   &g->ecc_vol, &g->ecc_agg, &g->retired_sbe, &g->retired_dbe, &g->retired_pending,
			   &g->remap_corr, &g->remap_unc, &g->remap_pending, &g->remap_failed, &g->persistence,
			   &g->reasons, &g->sm_mhz, &g->sm_max_mhz, &g->power_mw, &g->limit_mw, &g->default_limit_mw,
			   &g->nxid) != 19)
			g->have = 0;
	} else if (!strcmp(k, "gh_err")) {
		STR(g->err, v);
	} else if (!strcmp(k, "gh_driver")) {
		STR(g->driver, v);
	} else if (!strcmp(k, "gh_xids")) {
		STR(g->xids, v);
	} else if (!strcmp(k, "gh_xid_err")) {
		STR(g->xid_err, v);
	} else if (!strcmp(k, "gh_nvl")) {
		if (sscanf(v, "%d %lld %lld %lld", &g->nvlinks, &g->nvl_recovery, &g->nvl_crc, &g->nvl_replay) != 4)
			g->nvlinks = -1;
	} else if (!strcmp(k, "gh_p2p")) {
		STR(g->p2p, v);
	}
}

/* The copies between a node's GPUs (proto 7): "p2p_bus" their bus ids,
 * "p2p_gbps" n x n figures (row from, column to), "p2p_err". */
static void p2p_encode(struct out *o, const struct ck_p2p *p)
{
	char bus[CK_P2P_MAX * 17 + 1] = "", gb[CK_P2P_MAX * CK_P2P_MAX * 12 + 1] = "";
	size_t ob = 0, og = 0;
	for (int i = 0; i < p->n; i++)
		ob += (size_t)snprintf(bus + ob, sizeof(bus) - ob, "%s%s", i ? "," : "", p->bus[i]);
	for (int i = 0; i < p->n * p->n; i++)
		og += (size_t)snprintf(gb + og, sizeof(gb) - og, "%s%.3f", i ? " " : "", p->gbps[i]);
	put(o, "p2p_bus", "%s", bus);
	put(o, "p2p_gbps", "%s", gb);
	put(o, "p2p_err", "%s", p->err);
}

static void p2p_field(struct ck_p2p *p, const char *k, const char *v)
{
	if (!strcmp(k, "p2p_bus")) {
		p->n = 0;
		while (*v && p->n < CK_P2P_MAX) {
			size_t l = strcspn(v, ",");
			snprintf(p->bus[p->n++], sizeof(p->bus[0]), "%.*s", (int)(l < 15 ? l : 15), v);
			v += l + (v[l] == ',');
		}
	} else if (!strcmp(k, "p2p_gbps")) {
		char *end;
		for (int i = 0; i < CK_P2P_MAX * CK_P2P_MAX && *v; i++, v = end) {
			p->gbps[i] = strtof(v, &end);
			if (end == v)
				break;
		}
	} else if (!strcmp(k, "p2p_err")) {
		STR(p->err, v);
	}
}

int ck_rank_encode(const struct ck_rank *r, char *buf, size_t len)
{
	struct out o = { buf, len, 0, 0 };

	put(&o, "id", "%d", r->id);
	put(&o, "host", "%s", r->host);
	put(&o, "proto", "%d", r->proto);
	put(&o, "version", "%s", r->version);
	put(&o, "pid", "%ld", r->pid);
	for (int k = 0; k < CK_NENV; k++)
		if (r->have & (1u << k)) {
			char key[48];
			snprintf(key, sizeof(key), "env.%s", ck_env_names[k]);
			put(&o, key, "%s", r->env[k]);
		}
	put(&o, "ifvar", "%s", r->ifvar);
	put(&o, "ifname", "%s", r->ifname);
	put(&o, "ifstate", "%s", r->ifstate);
	put(&o, "ifaddr", "%s", r->ifaddr);
	put(&o, "ifkind", "%s", r->ifkind);
	put(&o, "ifmtu", "%d", r->ifmtu);
	put(&o, "rdma", "%s", r->rdma);
	put(&o, "ibports", "%s", r->ibports);
	char link[sizeof(struct ck_link) + 16];
	ck_link_encode(&r->gpu_link, link, sizeof(link));
	put(&o, "gpu_link", "%s", link);
	ck_link_encode(&r->nic_link, link, sizeof(link));
	put(&o, "nic_link", "%s", link);
	ck_gh_encode(&o, &r->gh);
	put(&o, "h2d", "%.6f", r->h2d_gbps);
	put(&o, "h2d_err", "%s", r->h2d_err);
	ck_link_encode(&r->h2d_link, link, sizeof(link));
	put(&o, "h2d_link", "%s", link);
	p2p_encode(&o, &r->p2p);
	put(&o, "memlock", "%lld", r->memlock);
	put(&o, "nofile", "%lld", r->nofile);
	put(&o, "nproc", "%lld", r->nproc);
	put(&o, "user_threads", "%lld", r->user_threads);
	put(&o, "shm_path", "%s", r->shm_path);
	put(&o, "shm_size", "%lld", r->shm_size);
	put(&o, "shm_free", "%lld", r->shm_free);
	put(&o, "shm_err", "%s", r->shm_err);
	put(&o, "shm_nccl", "%d", r->shm_nccl);
	put(&o, "shm_nccl_bytes", "%lld", r->shm_nccl_bytes);
	put(&o, "removeipc", "%d", r->removeipc);
	put(&o, "removeipc_err", "%s", r->removeipc_err);
	put(&o, "uid", "%ld", r->uid);
	put(&o, "nccl_env", "%s", r->nccl_env);
	put(&o, "ifs_here", "%s", r->ifs_here);
	put(&o, "head_local", "%d", r->head_local);
	put(&o, "head_err", "%s", r->head_err);
	put(&o, "cpus", "%s", r->cpus);
	put(&o, "numa", "%s", r->numa);
	put(&o, "allowed", "%s", r->allowed);
	put(&o, "gpu", "%s", r->gpu);
	put(&o, "gpu_from", "%s", r->gpu_from);
	put(&o, "mig", "%s", r->mig);
	put(&o, "gpu_near", "%s", r->gpu_near);
	put(&o, "gpu_numa", "%d", r->gpu_numa);
	put(&o, "visible", "%d", r->visible);
	put(&o, "step_gpus", "%d", r->step_gpus);
	put(&o, "nvgpus", "%s", r->nvgpus);
	put(&o, "nvgpus_err", "%s", r->nvgpus_err);
	put(&o, "gres_order", "%s", ddpenv_gres_order_name((enum ddpenv_gres_order)r->gres_order));
	put(&o, "topo_err", "%s", r->topo_err);
	put(&o, "probe", "%s", r->probe);
	put(&o, "joined_s", "%.6f", r->joined_s);
	put(&o, "backend_err", "%s", r->backend_err);
	put(&o, "nccl_version", "%d", r->nccl_version);
	return done(&o);
}

/* The host-to-device figures' lines (proto 7). */
static void h2d_field(struct ck_rank *r, const char *k, const char *v)
{
	if (!strcmp(k, "h2d"))
		r->h2d_gbps = atof(v);
	else if (!strcmp(k, "h2d_err"))
		STR(r->h2d_err, v);
	else if (!strcmp(k, "h2d_link"))
		ck_link_decode(v, &r->h2d_link);
}

static void rank_field(void *ctx, const char *k, const char *v)
{
	struct ck_rank *r = ctx;

	if (!strncmp(k, "env.", 4)) {
		for (int i = 0; i < CK_NENV; i++)
			if (!strcmp(k + 4, ck_env_names[i])) {
				STR(r->env[i], v);
				r->have |= 1u << i;
			}
	} else if (!strcmp(k, "id")) {
		r->id = atoi(v);
	} else if (!strcmp(k, "host")) {
		STR(r->host, v);
	} else if (!strcmp(k, "proto")) {
		r->proto = atoi(v);
	} else if (!strcmp(k, "version")) {
		STR(r->version, v);
	} else if (!strcmp(k, "pid")) {
		r->pid = atol(v);
	} else if (!strcmp(k, "ifvar")) {
		STR(r->ifvar, v);
	} else if (!strcmp(k, "ifname")) {
		STR(r->ifname, v);
	} else if (!strcmp(k, "ifstate")) {
		STR(r->ifstate, v);
	} else if (!strcmp(k, "ifaddr")) {
		STR(r->ifaddr, v);
	} else if (!strcmp(k, "ifkind")) {
		STR(r->ifkind, v);
	} else if (!strcmp(k, "ifmtu")) {
		r->ifmtu = atoi(v);
	} else if (!strcmp(k, "rdma")) {
		STR(r->rdma, v);
	} else if (!strcmp(k, "ibports")) {
		STR(r->ibports, v);
	} else if (!strcmp(k, "gpu_link")) {
		ck_link_decode(v, &r->gpu_link);
	} else if (!strcmp(k, "nic_link")) {
		ck_link_decode(v, &r->nic_link);
	} else if (!strncmp(k, "gh", 2)) {
		gh_field(&r->gh, k, v);
	} else if (!strncmp(k, "h2d", 3)) {
		h2d_field(r, k, v);
	} else if (!strncmp(k, "p2p_", 4)) {
		p2p_field(&r->p2p, k, v);
	} else if (!strcmp(k, "memlock")) {
		r->memlock = atoll(v);
	} else if (!strcmp(k, "nofile")) {
		r->nofile = atoll(v);
	} else if (!strcmp(k, "nproc")) {
		r->nproc = atoll(v);
	} else if (!strcmp(k, "user_threads")) {
		r->user_threads = atoll(v);
	} else if (!strcmp(k, "shm_path")) {
		STR(r->shm_path, v);
	} else if (!strcmp(k, "shm_size")) {
		r->shm_size = atoll(v);
	} else if (!strcmp(k, "shm_free")) {
		r->shm_free = atoll(v);
	} else if (!strcmp(k, "shm_err")) {
		STR(r->shm_err, v);
	} else if (!strcmp(k, "shm_nccl")) {
		r->shm_nccl = atoi(v);
	} else if (!strcmp(k, "shm_nccl_bytes")) {
		r->shm_nccl_bytes = atoll(v);
	} else if (!strcmp(k, "removeipc")) {
		r->removeipc = atoi(v);
	} else if (!strcmp(k, "removeipc_err")) {
		STR(r->removeipc_err, v);
	} else if (!strcmp(k, "uid")) {
		r->uid = atol(v);
	} else if (!strcmp(k, "nccl_env")) {
		STR(r->nccl_env, v);
	} else if (!strcmp(k, "ifs_here")) {
		STR(r->ifs_here, v);
	} else if (!strcmp(k, "head_local")) {
		r->head_local = atoi(v);
	} else if (!strcmp(k, "head_err")) {
		STR(r->head_err, v);
	} else if (!strcmp(k, "cpus")) {
		STR(r->cpus, v);
	} else if (!strcmp(k, "numa")) {
		STR(r->numa, v);
	} else if (!strcmp(k, "allowed")) {
		STR(r->allowed, v);
	} else if (!strcmp(k, "gpu")) {
		STR(r->gpu, v);
	} else if (!strcmp(k, "gpu_from")) {
		STR(r->gpu_from, v);
	} else if (!strcmp(k, "mig")) {
		STR(r->mig, v);
	} else if (!strcmp(k, "gpu_near")) {
		STR(r->gpu_near, v);
	} else if (!strcmp(k, "gpu_numa")) {
		r->gpu_numa = atoi(v);
	} else if (!strcmp(k, "visible")) {
		r->visible = atoi(v);
	} else if (!strcmp(k, "step_gpus")) {
		r->step_gpus = atoi(v);
	} else if (!strcmp(k, "nvgpus")) {
		STR(r->nvgpus, v);
	} else if (!strcmp(k, "nvgpus_err")) {
		STR(r->nvgpus_err, v);
	} else if (!strcmp(k, "gres_order")) {
		r->gres_order = !strcmp(v, "minor") ? DDPENV_GRES_ORDER_MINOR : DDPENV_GRES_ORDER_BUS;
	} else if (!strcmp(k, "topo_err")) {
		STR(r->topo_err, v);
	} else if (!strcmp(k, "probe")) {
		STR(r->probe, v);
	} else if (!strcmp(k, "joined_s")) {
		r->joined_s = atof(v);
	} else if (!strcmp(k, "backend_err")) {
		STR(r->backend_err, v);
	} else if (!strcmp(k, "nccl_version")) {
		r->nccl_version = atoi(v);
	}
}

int ck_rank_decode(struct ck_rank *r, const char *buf, size_t len)
{
	memset(r, 0, sizeof(*r));
	r->id = -1;
	r->head_local = -1;
	r->gpu_numa = -1;
	r->visible = -1;
	r->shm_size = r->shm_free = -1;
	r->removeipc = -1;
	r->gh.nvlinks = -1;
	each_line(buf, len, rank_field, r);
	return r->id >= 0 && r->host[0] ? 0 : -1;
}

/* A peer line: node \t addr \t ok \t rtt_us \t bulk_short \t err */
int ck_probe_encode(const struct ck_probe *p, char *buf, size_t len)
{
	struct out o = { buf, len, 0, 0 };

	put(&o, "probed", "%d", p->have);
	for (size_t i = 0; i < p->npeers; i++) {
		const struct ck_peer *q = &p->peers[i];
		put(&o, "peer", "%s\t%s\t%d\t%.1f\t%d\t%s", q->node, q->addr, q->ok, q->rtt_us,
		    q->bulk_short, q->err);
	}
	if (p->have_clock)
		put(&o, "clock", "%.1f\t%.1f", p->clock_off_us, p->clock_unc_us);
	return done(&o);
}

static void probe_field(void *ctx, const char *k, const char *v)
{
	struct ck_probe *p = ctx;

	if (!strcmp(k, "probed")) {
		p->have = atoi(v);
	} else if (!strcmp(k, "clock")) {
		p->have_clock = sscanf(v, "%lf\t%lf", &p->clock_off_us, &p->clock_unc_us) == 2;
	} else if (!strcmp(k, "peer")) {
		struct ck_peer *np = realloc(p->peers, (p->npeers + 1) * sizeof(*np));
		if (!np)
			return;
		p->peers = np;
		struct ck_peer *q = &p->peers[p->npeers++];
		memset(q, 0, sizeof(*q));
		char f[6][CK_MSG];
		size_t nf = 0, fl = 0;
		for (const char *s = v; nf < 6; s++) {
			if (*s == '\t' || !*s) {
				f[nf++][fl] = 0;
				fl = 0;
				if (!*s)
					break;
			} else if (fl < CK_MSG - 1) {
				f[nf][fl++] = *s;
			}
		}
		for (; nf < 6; nf++)
			f[nf][0] = 0;
		STR(q->node, f[0]);
		STR(q->addr, f[1]);
		q->ok = atoi(f[2]);
		q->rtt_us = atof(f[3]);
		q->bulk_short = atoi(f[4]);
		STR(q->err, f[5]);
	}
}

int ck_probe_decode(struct ck_probe *p, const char *buf, size_t len)
{
	memset(p, 0, sizeof(*p));
	each_line(buf, len, probe_field, p);
	return 0;
}

void ck_probe_free(struct ck_probe *p)
{
	free(p->peers);
	p->peers = NULL;
	p->npeers = 0;
}

int ck_coll_encode(const struct ck_coll *c, char *buf, size_t len)
{
	struct out o = { buf, len, 0, 0 };
	char t[CK_MAX_SIZES * 24] = "";
	size_t off = 0;

	put(&o, "ok", "%d", c->ok);
	put(&o, "msg", "%s", c->msg);
	put(&o, "first_s", "%.6f", c->first_s);
	put(&o, "init_s", "%.6f", c->init_s);
	for (size_t i = 0; i < c->ntimes && i < CK_MAX_SIZES; i++)
		off += (size_t)snprintf(t + off, sizeof(t) - off, "%s%.9g", i ? "," : "", c->times[i]);
	put(&o, "times", "%s", t);
	put(&o, "ops_ran", "%d", c->ops_ran);
	put(&o, "op_msg", "%s", c->op_msg);
	for (int op = 0; op < CK_NOPS; op++) {
		char key[40], wr[CK_MAX_SIZES * 12] = "";
		size_t woff = 0;
		off = 0;
		t[0] = '\0';
		for (size_t i = 0; i < c->nop_times[op] && i < CK_MAX_SIZES; i++) {
			off += (size_t)snprintf(t + off, sizeof(t) - off, "%s%.9g", i ? "," : "", c->op_times[op][i]);
			woff += (size_t)snprintf(wr + woff, sizeof(wr) - woff, "%s%ld", i ? "," : "", c->op_wrong[op][i]);
		}
		snprintf(key, sizeof(key), "t_%s", ck_op_name[op]);
		put(&o, key, "%s", t);
		snprintf(key, sizeof(key), "w_%s", ck_op_name[op]);
		put(&o, key, "%s", wr);
	}
	put(&o, "pairs_ran", "%d", c->pairs_ran);
	put(&o, "pair_msg", "%s", c->pair_msg);
	for (size_t i = 0; i < c->npairs && i < CK_MAX_PAIRS; i++)
		put(&o, "pair", "%d:%.9g", c->pairs[i].peer, c->pairs[i].gbps);
	return done(&o);
}

/* "a,b,c" into v[max] (strtod): how many. */
static size_t num_list(const char *s, double *v, size_t max)
{
	size_t n = 0;
	while (*s && n < max) {
		char *end;
		v[n] = strtod(s, &end);
		if (end == s)
			break;
		n++;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

/* t_NAME and w_NAME: one of the other collectives' times or wrong counts. */
static void op_field(struct ck_coll *c, const char *k, const char *v)
{
	double d[CK_MAX_SIZES];
	for (int op = 0; op < CK_NOPS; op++) {
		if (strcmp(k + 2, ck_op_name[op]) != 0)
			continue;
		size_t n = num_list(v, d, CK_MAX_SIZES);
		for (size_t i = 0; i < n; i++) {
			if (k[0] == 't')
				c->op_times[op][i] = d[i];
			else
				c->op_wrong[op][i] = (long)d[i];
		}
		if (k[0] == 't')
			c->nop_times[op] = n;
	}
}

static void coll_field(void *ctx, const char *k, const char *v)
{
	struct ck_coll *c = ctx;

	if (!strcmp(k, "ok")) {
		c->ok = atoi(v);
	} else if (!strcmp(k, "msg")) {
		STR(c->msg, v);
	} else if (!strcmp(k, "first_s")) {
		c->first_s = atof(v);
	} else if (!strcmp(k, "init_s")) {
		c->init_s = atof(v);
	} else if (!strcmp(k, "times")) {
		c->ntimes = num_list(v, c->times, CK_MAX_SIZES);
	} else if (!strcmp(k, "ops_ran")) {
		c->ops_ran = atoi(v);
	} else if (!strcmp(k, "op_msg")) {
		STR(c->op_msg, v);
	} else if ((k[0] == 't' || k[0] == 'w') && k[1] == '_') {
		op_field(c, k, v);
	} else if (!strcmp(k, "pairs_ran")) {
		c->pairs_ran = atoi(v);
	} else if (!strcmp(k, "pair_msg")) {
		STR(c->pair_msg, v);
	} else if (!strcmp(k, "pair") && c->npairs < CK_MAX_PAIRS) {
		char *end;
		long peer = strtol(v, &end, 10);
		if (end != v && *end == ':' && peer >= 0 && peer < 1 << 30) {
			c->pairs[c->npairs].peer = (int)peer;
			c->pairs[c->npairs++].gbps = strtod(end + 1, NULL);
		}
	}
}

int ck_coll_decode(struct ck_coll *c, const char *buf, size_t len)
{
	memset(c, 0, sizeof(*c));
	each_line(buf, len, coll_field, c);
	c->have = 1;
	return 0;
}

size_t ck_sizes(const struct ck_opts *o, size_t *out, size_t max)
{
	size_t n = 0;
	size_t f = o->step_factor > 1 ? (size_t)o->step_factor : 2;

	if (o->max_bytes == 0)
		return 0;
	for (size_t s = o->min_bytes < 4 ? 4 : o->min_bytes; s <= o->max_bytes && n < max; s *= f) {
		out[n++] = s / 4 * 4;
		if (s > o->max_bytes / f)
			break;
	}
	return n;
}
