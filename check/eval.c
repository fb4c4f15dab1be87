/* ddp-check's verdicts: every check looks only at struct ck_world, the
 * records rank 0 gathered, and names the task, node and value at fault. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hwloc.h>

#include "check.h"

#define MAX_NAMED 8   /* tasks named in one message before "and N more" */

void ck_add(struct ck_world *w, const char *name, enum ck_level lv, const char *fmt, ...)
{
	if (w->nres == w->capres) {
		size_t cap = w->capres ? 2 * w->capres : 32;
		struct ck_result *r = realloc(w->res, cap * sizeof(*r));
		if (!r)
			return;
		w->res = r;
		w->capres = cap;
	}
	struct ck_result *r = &w->res[w->nres++];
	va_list ap;

	snprintf(r->name, sizeof(r->name), "%s", name);
	r->level = lv;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
}

/* A growing message: "a; b; c; and 4 more". */
struct msg {
	char s[CK_MSG];
	size_t off;
	int items, dropped;
};

static void say(struct msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct msg *m, const char *fmt, ...)
{
	va_list ap;

	if (m->items >= MAX_NAMED || m->off >= sizeof(m->s) - 64) {
		m->dropped++;
		return;
	}
	if (m->items++ && m->off < sizeof(m->s))
		m->off += (size_t)snprintf(m->s + m->off, sizeof(m->s) - m->off, "; ");
	va_start(ap, fmt);
	if (m->off < sizeof(m->s))
		m->off += (size_t)vsnprintf(m->s + m->off, sizeof(m->s) - m->off, fmt, ap);
	va_end(ap);
	if (m->off >= sizeof(m->s))
		m->off = sizeof(m->s) - 1;
}

static const char *said(struct msg *m)
{
	if (m->dropped && m->off < sizeof(m->s))
		snprintf(m->s + m->off, sizeof(m->s) - m->off, "; and %d more", m->dropped);
	return m->s;
}

static int has(const struct ck_rank *r, enum ck_env k)
{
	return r->joined && (r->have & (1u << k));
}

/* An integer variable: 1 with *v set when it is a non-negative integer. */
static int intval(const struct ck_rank *r, enum ck_env k, long *v)
{
	char *end;

	if (!has(r, k) || !r->env[k][0])
		return 0;
	*v = strtol(r->env[k], &end, 10);
	return *end == 0 && *v >= 0;
}

/* The node a task ran on, numbered in order of first appearance. */
static int node_of(const struct ck_world *w, int id, char (*nodes)[CK_HOST], int *nn)
{
	for (int i = 0; i < *nn; i++)
		if (!strcmp(nodes[i], w->ranks[id].host))
			return i;
	snprintf(nodes[*nn], CK_HOST, "%s", w->ranks[id].host);
	return (*nn)++;
}

struct nodes {
	int n;
	char (*name)[CK_HOST];
	int *of;        /* [w->n]: node of each joined task, -1 otherwise */
	int *first;     /* [n]: first task of the node */
	int *count;     /* [n] */
};

static int nodes_build(const struct ck_world *w, struct nodes *nd)
{
	memset(nd, 0, sizeof(*nd));
	nd->name = calloc((size_t)w->n + 1, sizeof(*nd->name));
	nd->of = calloc((size_t)w->n + 1, sizeof(int));
	nd->first = calloc((size_t)w->n + 1, sizeof(int));
	nd->count = calloc((size_t)w->n + 1, sizeof(int));
	if (!nd->name || !nd->of || !nd->first || !nd->count)
		return -1;
	for (int i = 0; i < w->n; i++) {
		nd->of[i] = -1;
		if (!w->ranks[i].joined)
			continue;
		int before = nd->n;
		nd->of[i] = node_of(w, i, nd->name, &nd->n);
		if (nd->n > before)
			nd->first[nd->of[i]] = i;
		nd->count[nd->of[i]]++;
	}
	return 0;
}

static void nodes_free(struct nodes *nd)
{
	free(nd->name);
	free(nd->of);
	free(nd->first);
	free(nd->count);
}

static int all_joined(const struct ck_world *w)
{
	for (int i = 0; i < w->n; i++)
		if (!w->ranks[i].joined)
			return 0;
	return 1;
}

/* ---- the contract ----------------------------------------------------------- */

static void eval_join(struct ck_world *w)
{
	struct msg m = { 0 };
	int missing = 0;
	const struct ck_rank *r0 = NULL;

	for (int i = 0; i < w->n; i++) {
		if (!w->ranks[i].joined) {
			missing++;
			say(&m, "%d", i);
		} else if (!r0) {
			r0 = &w->ranks[i];
		}
	}
	const char *addr = r0 && has(r0, CK_MASTER_ADDR) ? r0->env[CK_MASTER_ADDR] : "?";
	const char *port = r0 && has(r0, CK_MASTER_PORT) ? r0->env[CK_MASTER_PORT] : "?";
	if (!missing)
		ck_add(w, "rdzv.join", CK_OK, "all %d tasks joined the rendezvous at %s:%s", w->n, addr, port);
	else
		ck_add(w, "rdzv.join", CK_FAIL,
		       "task%s %s (of %d) never joined the rendezvous at %s:%s within %d s; each "
		       "prints its own reason on its stderr (a different MASTER_ADDR or MASTER_PORT, "
		       "no route to the head, a wrong DDP_RDZV_TOKEN)%s%s",
		       missing > 1 ? "s" : "", said(&m), w->n, addr, port, w->opts.timeout_s,
		       w->refused[0] ? "; the rendezvous " : "", w->refused);
}

static void eval_present(struct ck_world *w)
{
	struct msg m = { 0 };

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		char lack[256] = "";
		size_t off = 0;
		if (!r->joined)
			continue;
		for (int k = 0; k < CK_NCONTRACT; k++)
			if (!has(r, k) || !r->env[k][0])
				off += (size_t)snprintf(lack + off, sizeof(lack) - off, "%s%s", off ? " " : "",
							ck_env_names[k]);
		if (off)
			say(&m, "task %d (%s) lacks %s", i, r->host, lack);
	}
	if (m.items)
		ck_add(w, "env.present", CK_FAIL, "%s (run it with srun --ddp, or set them all)", said(&m));
	else
		ck_add(w, "env.present", CK_OK, "MASTER_ADDR MASTER_PORT RANK LOCAL_RANK WORLD_SIZE "
		       "LOCAL_WORLD_SIZE NODE_RANK set on every task");
}

/* Group the tasks by the value of a variable; the most common value
 * first.  Writes "6 on tasks 0-1,3-5; 5 on task 2 (node2)" and returns
 * how many distinct values there were. */
static int groups(const struct ck_world *w, enum ck_env k, char *out, size_t len,
		  const char **common)
{
	int nv = 0, *seen = calloc((size_t)w->n, sizeof(int));
	size_t off = 0;

	*common = NULL;
	out[0] = 0;
	if (!seen)
		return 0;
	/* Value classes by first task; pick the largest as "common". */
	int best = -1, bestn = 0;
	for (int i = 0; i < w->n; i++) {
		if (!has(&w->ranks[i], k) || seen[i])
			continue;
		int cnt = 0;
		for (int j = i; j < w->n; j++)
			if (has(&w->ranks[j], k) && !strcmp(w->ranks[j].env[k], w->ranks[i].env[k])) {
				seen[j] = i + 1;
				cnt++;
			}
		nv++;
		if (cnt > bestn) {
			best = i;
			bestn = cnt;
		}
	}
	if (best >= 0)
		*common = w->ranks[best].env[k];
	/* Print the minority classes with their tasks, then the common one. */
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < w->n; i++) {
			if (!seen[i] || seen[i] != i + 1 || (pass == 0) == (i == best))
				continue;
			int shown = 0, more = 0;
			off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s=%s on ",
						off ? "; " : "", ck_env_names[k], w->ranks[i].env[k]);
			for (int j = i; j < w->n; j++) {
				if (seen[j] != i + 1)
					continue;
				if (shown < (pass == 0 ? 4 : 2)) {
					off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%stask %d (%s)",
								shown ? ", " : "", j, w->ranks[j].host);
					shown++;
				} else {
					more++;
				}
			}
			if (more)
				off += (size_t)snprintf(out + off, off < len ? len - off : 0, " and %d more", more);
		}
	}
	if (off >= len && len > 4)
		strcpy(out + len - 4, "...");
	free(seen);
	return nv;
}

static void eval_same(struct ck_world *w, const char *name, enum ck_env a, enum ck_env b)
{
	char ga[CK_MSG / 2], gb[CK_MSG / 2];
	const char *ca, *cb;
	int na = groups(w, a, ga, sizeof(ga), &ca), nb = groups(w, b, gb, sizeof(gb), &cb);

	if (na > 1 || nb > 1)
		ck_add(w, name, CK_FAIL, "differ between tasks: %s%s%s", na > 1 ? ga : "",
		       na > 1 && nb > 1 ? "; " : "", nb > 1 ? gb : "");
	else if (ca && cb)
		ck_add(w, name, CK_OK, "MASTER_ADDR=%s MASTER_PORT=%s on every task", ca, cb);
	else
		ck_add(w, name, CK_SKIP, "MASTER_ADDR or MASTER_PORT is set on no task");
}

static void eval_world(struct ck_world *w)
{
	char g[CK_MSG];
	const char *common;
	int nv = groups(w, CK_WORLD_SIZE, g, sizeof(g), &common);

	if (nv > 1) {
		ck_add(w, "env.world_size", CK_FAIL, "differs between tasks: %s", g);
		return;
	}
	if (!common) {
		ck_add(w, "env.world_size", CK_SKIP, "WORLD_SIZE is set on no task");
		return;
	}
	char *end;
	long ws = strtol(common, &end, 10);
	if (*end || ws != w->n)
		ck_add(w, "env.world_size", CK_FAIL, "WORLD_SIZE=%s on every task, but the step has %d tasks",
		       common, w->n);
	else
		ck_add(w, "env.world_size", CK_OK, "WORLD_SIZE=%d on every task, the step's task count", w->n);
}

static void eval_rank(struct ck_world *w)
{
	struct msg m = { 0 };
	int *owner = malloc((size_t)w->n * sizeof(int));

	if (!owner)
		return;
	for (int i = 0; i < w->n; i++)
		owner[i] = -1;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		long v;
		if (!r->joined || !has(r, CK_RANK))
			continue;
		if (!intval(r, CK_RANK, &v) || v >= w->n) {
			say(&m, "task %d (%s) has RANK=%s, expected 0..%d", i, r->host, r->env[CK_RANK], w->n - 1);
		} else if (owner[v] >= 0) {
			say(&m, "RANK=%ld on both task %d (%s) and task %d (%s)", v, owner[v],
			    w->ranks[owner[v]].host, i, r->host);
		} else {
			owner[v] = i;
		}
	}
	if (!m.items && all_joined(w)) {
		for (int v = 0; v < w->n; v++)
			if (owner[v] < 0)
				say(&m, "no task has RANK=%d", v);
	}
	free(owner);
	if (m.items)
		ck_add(w, "env.rank", CK_FAIL, "%s", said(&m));
	else
		ck_add(w, "env.rank", CK_OK, "RANK 0..%d, each on one task", w->n - 1);
}

static void eval_local(struct ck_world *w, const struct nodes *nd)
{
	struct msg m = { 0 };
	int complete = all_joined(w);

	for (int n = 0; n < nd->n; n++) {
		int cnt = nd->count[n];
		char *seen = calloc((size_t)cnt + 1, 1);
		if (!seen)
			return;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			long v, lw;
			if (nd->of[i] != n)
				continue;
			if (has(r, CK_LOCAL_RANK) && (!intval(r, CK_LOCAL_RANK, &v) || (complete && v >= cnt)))
				say(&m, "task %d (%s) has LOCAL_RANK=%s, expected 0..%d (%d tasks there)", i,
				    r->host, r->env[CK_LOCAL_RANK], cnt - 1, cnt);
			else if (has(r, CK_LOCAL_RANK) && v <= cnt && seen[v]++)
				say(&m, "LOCAL_RANK=%ld twice on %s (task %d and another)", v, r->host, i);
			if (complete && has(r, CK_LOCAL_WORLD_SIZE) &&
			    (!intval(r, CK_LOCAL_WORLD_SIZE, &lw) || lw != cnt))
				say(&m, "task %d (%s) has LOCAL_WORLD_SIZE=%s, but %d tasks run there", i,
				    r->host, r->env[CK_LOCAL_WORLD_SIZE], cnt);
		}
		free(seen);
	}
	if (m.items)
		ck_add(w, "env.local_rank", CK_FAIL, "%s", said(&m));
	else
		ck_add(w, "env.local_rank", CK_OK, "LOCAL_RANK unique on each of %d node%s, LOCAL_WORLD_SIZE "
		       "its task count", nd->n, nd->n == 1 ? "" : "s");
}

static void eval_node_rank(struct ck_world *w, const struct nodes *nd)
{
	struct msg m = { 0 };
	long *val = malloc(((size_t)nd->n + 1) * sizeof(long));

	if (!val)
		return;
	for (int n = 0; n < nd->n; n++)
		val[n] = -1;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		long v;
		int n = nd->of[i];
		if (n < 0 || !has(r, CK_NODE_RANK))
			continue;
		if (!intval(r, CK_NODE_RANK, &v) || (all_joined(w) && v >= nd->n)) {
			say(&m, "task %d (%s) has NODE_RANK=%s, expected 0..%d", i, r->host,
			    r->env[CK_NODE_RANK], nd->n - 1);
		} else if (val[n] < 0) {
			val[n] = v;
		} else if (val[n] != v) {
			say(&m, "tasks on %s disagree: NODE_RANK=%ld and %ld (task %d)", r->host, val[n], v, i);
		}
	}
	for (int a = 0; a < nd->n; a++)
		for (int b = a + 1; b < nd->n; b++)
			if (val[a] >= 0 && val[a] == val[b])
				say(&m, "NODE_RANK=%ld on both %s and %s", val[a], nd->name[a], nd->name[b]);
	free(val);
	if (m.items)
		ck_add(w, "env.node_rank", CK_FAIL, "%s", said(&m));
	else
		ck_add(w, "env.node_rank", CK_OK, "NODE_RANK the same within each node, distinct across %d",
		       nd->n);
}

static void eval_head(struct ck_world *w, const struct nodes *nd)
{
	const struct ck_rank *r0 = NULL;

	for (int i = 0; i < w->n && !r0; i++) {
		long v;
		if (intval(&w->ranks[i], CK_RANK, &v) && v == 0)
			r0 = &w->ranks[i];
	}
	if (!r0) {
		ck_add(w, "env.head", CK_SKIP, "no task with RANK=0 reported");
		return;
	}
	const char *ma = r0->env[CK_MASTER_ADDR];
	struct ddpenv_addr a;
	if (!has(r0, CK_MASTER_ADDR)) {
		ck_add(w, "env.head", CK_FAIL, "RANK 0 (%s) has no MASTER_ADDR", r0->host);
	} else if (nd->n > 1 && ddpenv_addr_parse(ma, &a) == 0 && ddpenv_addr_is_loopback(&a)) {
		ck_add(w, "env.head", CK_FAIL, "MASTER_ADDR=%s is a loopback address: the other %d node%s "
		       "cannot reach RANK 0 on %s there (a '127.0.1.1 %s' line in /etc/hosts?)", ma,
		       nd->n - 1, nd->n == 2 ? "" : "s", r0->host, r0->host);
	} else if (r0->head_local == 1) {
		ck_add(w, "env.head", CK_OK, "MASTER_ADDR=%s is an address of %s, which runs RANK 0", ma,
		       r0->host);
	} else if (r0->head_local == 0) {
		ck_add(w, "env.head", CK_FAIL, "MASTER_ADDR=%s is not an address of %s, which runs RANK 0 "
		       "(RANK 0 hosts the rendezvous there)%s%s", ma, r0->host, r0->head_err[0] ? ": " : "",
		       r0->head_err);
	} else {
		ck_add(w, "env.head", CK_WARN, "could not tell whether MASTER_ADDR=%s is %s's: %s", ma,
		       r0->host, r0->head_err[0] ? r0->head_err : "no answer");
	}
}

/* ---- network ------------------------------------------------------------------ */

static void eval_iface(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	char first[128] = "", names[128] = "";
	size_t noff = 0;
	int nnames = 0, nlocal = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined)
			continue;
		const char *st = r->ifstate;
		/* a loopback or a bridge serves a step on one node */
		int local = nd->n <= 1 && (!strcmp(st, "loopback") || !strcmp(st, "virtual"));
		if (local)
			nlocal++;
		if (!strcmp(st, "up") || local) {
			if (!first[0])
				snprintf(first, sizeof(first), "%s", r->ifvar);
			if (!strstr(names, r->ifname) && nnames++ < 4)
				noff += (size_t)snprintf(names + noff, noff < sizeof(names) ? sizeof(names) - noff : 0,
							 "%s%s", noff ? ", " : "", r->ifname);
		} else if (!strcmp(st, "unset")) {
			say(&warn, "task %d (%s): %s is not set, so the backend picks an interface itself "
			    "(the route to the head is %s)", i, r->host, r->ifvar, r->ifname[0] ? r->ifname : "unknown");
		} else if (!strcmp(st, "missing")) {
			say(&fail, "task %d (%s): %s=%s: no such interface there (it has %s)", i, r->host,
			    r->ifvar, r->ifname, r->ifs_here);
		} else if (!strcmp(st, "down")) {
			say(&fail, "task %d (%s): %s=%s is down", i, r->host, r->ifvar, r->ifname);
		} else if (!strcmp(st, "noaddr")) {
			say(&fail, "task %d (%s): %s=%s has no address of the head's family (MASTER_ADDR=%s)",
			    i, r->host, r->ifvar, r->ifname, r->env[CK_MASTER_ADDR]);
		} else if (!strcmp(st, "loopback")) {
			if (nd->n > 1)
				say(&fail, "task %d (%s): %s=%s is a loopback interface: other nodes cannot "
				    "reach it", i, r->host, r->ifvar, r->ifname);
		} else if (!strcmp(st, "virtual")) {
			if (nd->n > 1)
				say(&fail, "task %d (%s): %s=%s is a container or virtual bridge (%s): other "
				    "nodes cannot reach it", i, r->host, r->ifvar, r->ifname, r->ifaddr);
		} else if (!strcmp(st, "pattern")) {
			say(&warn, "task %d (%s): %s=%s excludes interfaces rather than naming one: not "
			    "checked", i, r->host, r->ifvar, r->env[CK_NCCL_IF]);
		} else {
			say(&fail, "task %d (%s): interface state '%s'", i, r->host, st);
		}
	}
	if (fail.items)
		ck_add(w, "net.iface", CK_FAIL, "%s", said(&fail));
	else if (warn.items)
		ck_add(w, "net.iface", CK_WARN, "%s", said(&warn));
	else
		ck_add(w, "net.iface", CK_OK, "%s (%s%s) exists, is up and has an address of the head's "
		       "family on every task%s", first[0] ? first : "the interface", names,
		       nnames > 4 ? ", ..." : "",
		       nlocal ? " (local only, enough for a step on one node)" : "");
}

static void eval_kind(struct ck_world *w, const struct nodes *nd)
{
	char kinds[8][16];
	int nk = 0, which[8] = { 0 };
	struct msg m = { 0 };

	for (int n = 0; n < nd->n; n++) {
		const struct ck_rank *r = &w->ranks[nd->first[n]];
		int k;
		if (!r->ifkind[0])
			continue;
		for (k = 0; k < nk; k++)
			if (!strcmp(kinds[k], r->ifkind))
				break;
		if (k == nk && nk < 8)
			snprintf(kinds[nk++], sizeof(kinds[0]), "%s", r->ifkind);
		if (k < 8)
			which[k]++;
	}
	if (nk == 0) {
		ck_add(w, "net.kind", CK_SKIP, "no node reported its interface's kind");
		return;
	}
	if (nk == 1) {
		ck_add(w, "net.kind", CK_OK, "%s on every node", kinds[0]);
		return;
	}
	for (int n = 0; n < nd->n; n++) {
		const struct ck_rank *r = &w->ranks[nd->first[n]];
		say(&m, "%s: %s (%s)", r->host, r->ifkind, r->ifname);
	}
	ck_add(w, "net.kind", CK_WARN, "the nodes use different kinds of interface: %s; the "
	       "slowest sets the pace of every collective", said(&m));
}

static void eval_probe(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	double worst = 0;
	char worst_s[160] = "";
	int pairs = 0;

	if (nd->n < 2) {
		ck_add(w, "net.probe", CK_OK, "one node: no other node to reach");
		return;
	}
	for (int n = 0; n < nd->n; n++) {
		int p = -1;
		for (int i = 0; i < w->n; i++)
			if (nd->of[i] == n && w->probes[i].have) {
				p = i;
				break;
			}
		if (p < 0) {
			int f = nd->first[n];
			if (!w->ranks[f].probe[0])
				say(&warn, "%s was not probed: no usable interface to listen on (net.iface)",
				    nd->name[n]);
			else
				say(&fail, "%s did not report its probes (its prober, task %d, is gone?)",
				    nd->name[n], f);
			continue;
		}
		const struct ck_probe *pr = &w->probes[p];
		for (size_t k = 0; k < pr->npeers; k++) {
			const struct ck_peer *q = &pr->peers[k];
			pairs++;
			if (!q->ok) {
				say(&fail, "%s cannot reach %s at %s: %s", nd->name[n], q->node, q->addr, q->err);
			} else if (q->rtt_us > worst) {
				worst = q->rtt_us;
				snprintf(worst_s, sizeof(worst_s), "%s to %s", nd->name[n], q->node);
			}
		}
	}
	if (fail.items)
		ck_add(w, "net.probe", CK_FAIL, "%s%s%s", said(&fail), warn.items ? "; " : "",
		       warn.items ? said(&warn) : "");
	else if (warn.items)
		ck_add(w, "net.probe", CK_WARN, "%s", said(&warn));
	else
		ck_add(w, "net.probe", CK_OK, "every node reached every other (%d connections within %d ms; "
		       "slowest %.0f us, %s)", pairs, w->opts.probe_ms, worst, worst_s);
}

static void eval_clock(struct ck_world *w, const struct nodes *nd)
{
	double worst = 0, unc = 0;
	const char *who = NULL;
	int measured = 0;

	if (nd->n < 2) {
		ck_add(w, "clock.skew", CK_OK, "one node: no skew to measure");
		return;
	}
	for (int i = 0; i < w->n; i++) {
		const struct ck_probe *p = &w->probes[i];
		if (!p->have || !p->have_clock)
			continue;
		measured++;
		if (!who || fabs(p->clock_off_us) > fabs(worst)) {
			worst = p->clock_off_us;
			unc = p->clock_unc_us;
			who = w->ranks[i].host;
		}
	}
	if (!who) {
		ck_add(w, "clock.skew", CK_SKIP, "no node could reach the head's node to compare clocks");
		return;
	}
	const char *head = nd->name[0];
	if (fabs(worst) - unc > w->opts.max_skew_ms * 1000)
		ck_add(w, "clock.skew", CK_WARN, "%s's clock is %.1f ms %s %s's (+-%.2f ms), more than %.0f ms: "
		       "is NTP (chrony) running there?", who, fabs(worst) / 1000,
		       worst > 0 ? "ahead of" : "behind", head, unc / 1000, w->opts.max_skew_ms);
	else
		ck_add(w, "clock.skew", CK_OK, "largest skew to %s: %.3f ms (%s, +-%.3f ms), %d node%s measured",
		       head, fabs(worst) / 1000, who, unc / 1000, measured, measured == 1 ? "" : "s");
}

/* ---- binding ---------------------------------------------------------------------- */

/* A CPU list from another task: refused when it names a CPU beyond any
 * machine's (a record could otherwise make task 0 allocate gigabytes). */
#define CK_MAX_CPU 65535

static int bm(hwloc_bitmap_t b, const char *list)
{
	/* "N" or "N-M" items, comma-separated, every N <= CK_MAX_CPU */
	const char *s = list;
	if (!s || !*s)
		return 0;
	for (;;) {
		for (int half = 0; half < 2; half++) {
			if (*s < '0' || *s > '9')
				return 0;
			unsigned long v = 0;
			while (*s >= '0' && *s <= '9' && v <= CK_MAX_CPU)
				v = v * 10 + (unsigned long)(*s++ - '0');
			if (v > CK_MAX_CPU)
				return 0;
			if (half == 1 || *s != '-')
				break;
			s++;
		}
		if (!*s)
			break;
		if (*s++ != ',')
			return 0;
	}
	return hwloc_bitmap_list_sscanf(b, list) == 0;
}

/* Tasks i and j share CPUs because their GPUs have fewer CPUs near them
 * than tasks using them: the plan keeps locality over spreading. */
static int near_crowded(const struct ck_world *w, const struct nodes *nd, int i, int j)
{
	const struct ck_rank *a = &w->ranks[i], *b = &w->ranks[j];
	hwloc_bitmap_t near = hwloc_bitmap_alloc(), c = hwloc_bitmap_alloc();
	int ok = 0, users = 0;

	if (a->gpu_near[0] && !strcmp(a->gpu_near, b->gpu_near) && bm(near, a->gpu_near)) {
		for (int k = 0; k < w->n; k++)
			users += nd->of[k] == nd->of[i] && !strcmp(w->ranks[k].gpu_near, a->gpu_near);
		ok = users > hwloc_bitmap_weight(near) && bm(c, a->cpus) &&
		     hwloc_bitmap_isincluded(c, near) && bm(c, b->cpus) && hwloc_bitmap_isincluded(c, near);
	}
	hwloc_bitmap_free(near);
	hwloc_bitmap_free(c);
	return ok;
}

static void eval_cpus(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc(), x = hwloc_bitmap_alloc(),
		       all = hwloc_bitmap_alloc(), used = hwloc_bitmap_alloc(), idle = hwloc_bitmap_alloc();

	for (int n = 0; n < nd->n; n++) {
		int unbound = 0, pairs = 0, crowded = 0, pi = -1, pj = -1;
		char ov[64] = "";
		hwloc_bitmap_zero(all);
		hwloc_bitmap_zero(used);
		for (int i = 0; i < w->n; i++) {
			if (nd->of[i] != n)
				continue;
			if (bm(a, w->ranks[i].allowed))
				hwloc_bitmap_or(all, all, a);
			if (bm(a, w->ranks[i].cpus))
				hwloc_bitmap_or(used, used, a);
		}
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n)
				continue;
			if (!bm(a, r->cpus) || hwloc_bitmap_iszero(a)) {
				say(&fail, "task %d (%s) has no CPU ('%s')", i, r->host, r->cpus);
				continue;
			}
			int whole = r->allowed[0] && !strcmp(r->cpus, r->allowed);
			unbound += whole;
			for (int j = i + 1; j < w->n; j++) {
				if (nd->of[j] != n || !bm(b, w->ranks[j].cpus))
					continue;
				hwloc_bitmap_and(x, a, b);
				/* Two unbound tasks are said once, below. */
				if (hwloc_bitmap_iszero(x) || (whole && !strcmp(w->ranks[j].cpus, r->allowed)))
					continue;
				crowded += near_crowded(w, nd, i, j);
				if (!pairs++) {
					pi = i;
					pj = j;
					hwloc_bitmap_list_snprintf(ov, sizeof(ov), x);
				}
			}
		}
		if (pairs) {
			/* More tasks than CPUs must share; but not while CPUs sit idle. */
			int must_share = hwloc_bitmap_weight(all) < nd->count[n];
			hwloc_bitmap_andnot(idle, all, used);
			char idle_s[64] = "";
			hwloc_bitmap_list_snprintf(idle_s, sizeof(idle_s), idle);
			char more[48] = "";
			if (pairs > 1)
				snprintf(more, sizeof(more), " (%d overlapping pairs)", pairs);
			if (crowded == pairs)
				say(&warn, "%s: tasks %d and %d share CPUs %s%s near their GPUs: more tasks "
				    "than CPUs near those GPUs", nd->name[n], pi, pj, ov, more);
			else if (must_share && hwloc_bitmap_iszero(idle))
				say(&warn, "%s: tasks %d and %d share CPUs %s%s: %d tasks on %d CPUs", nd->name[n],
				    pi, pj, ov, more, nd->count[n], hwloc_bitmap_weight(all));
			else
				say(&fail, "%s: task %d (CPUs %s) and task %d (CPUs %s) overlap on %s%s%s%s",
				    nd->name[n], pi, w->ranks[pi].cpus, pj, w->ranks[pj].cpus, ov, more,
				    idle_s[0] ? ", while no task uses CPUs " : "", idle_s);
		}
		if (unbound > 1)
			say(&warn, "%s: %d tasks are not bound, each may run on all of CPUs %s "
			    "(--ddp-bind=none or --cpu-bind=none?)", nd->name[n], unbound,
			    w->ranks[nd->first[n]].allowed);
	}
	hwloc_bitmap_free(a);
	hwloc_bitmap_free(b);
	hwloc_bitmap_free(x);
	hwloc_bitmap_free(all);
	hwloc_bitmap_free(used);
	hwloc_bitmap_free(idle);
	if (fail.items)
		ck_add(w, "bind.cpus", CK_FAIL, "%s%s%s", said(&fail), warn.items ? "; " : "",
		       warn.items ? said(&warn) : "");
	else if (warn.items)
		ck_add(w, "bind.cpus", CK_WARN, "%s", said(&warn));
	else
		ck_add(w, "bind.cpus", CK_OK, "every task has CPUs of its own, disjoint from its node's "
		       "other tasks");
}

static void eval_locality(struct ck_world *w)
{
	struct msg warn = { 0 };
	int gpus = 0;
	hwloc_bitmap_t a = hwloc_bitmap_alloc(), near = hwloc_bitmap_alloc();

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0])
			continue;
		gpus++;
		if (!r->gpu_near[0] || !bm(near, r->gpu_near)) {
			say(&warn, "task %d (%s): GPU %s: locality unknown (%s)", i, r->host, r->gpu,
			    r->topo_err[0] ? r->topo_err : "the topology does not place it");
			continue;
		}
		if (!bm(a, r->cpus))
			continue;
		if (hwloc_bitmap_isincluded(a, near))
			continue;
		if (hwloc_bitmap_intersects(a, near))
			say(&warn, "task %d (%s): CPUs %s are not all near its GPU %s (near: %s)", i, r->host,
			    r->cpus, r->gpu, r->gpu_near);
		else
			say(&warn, "task %d (%s): CPUs %s (NUMA %s) are far from its GPU %s (NUMA %d, near: %s)",
			    i, r->host, r->cpus, r->numa, r->gpu, r->gpu_numa, r->gpu_near);
	}
	hwloc_bitmap_free(a);
	hwloc_bitmap_free(near);
	int migs = 0, unplaced = 0;
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		migs += r->joined && r->mig[0] && !r->gpu[0];
		unplaced += r->joined && !r->mig[0] && !r->gpu[0] && r->step_gpus > 0;
	}
	if (!gpus && migs)
		ck_add(w, "bind.locality", CK_SKIP, "the tasks' GPUs are MIG devices, and which GPU each is on "
		       "only NVML knows (ddp-check --ddp=nccl asks CUDA): their locality is not checked");
	else if (!gpus && unplaced)
		ck_add(w, "bind.locality", CK_SKIP, "the tasks' GPUs have no PCI bus id: the topology does not "
		       "place them (no DDP_GPU_BUSID), and CUDA was not asked or did not answer; their "
		       "locality is not checked");
	else if (!gpus)
		ck_add(w, "bind.locality", CK_OK, "no task has a GPU: nothing to place near one");
	else if (warn.items)
		ck_add(w, "bind.locality", CK_WARN, "%s", said(&warn));
	else
		ck_add(w, "bind.locality", CK_OK, "each of %d tasks runs on CPUs near its GPU", gpus);
}

/* What names a task's GPU: its MIG device, else its bus id, else (no
 * topology places it, and no CUDA was asked) the entry of its
 * CUDA_VISIBLE_DEVICES that a CUDA program opens: the only one, or the
 * one at LOCAL_RANK (the plugin's order).  by_index says it is the last. */
static const char *gpu_key(const struct ck_rank *r, char *buf, size_t len, int *by_index)
{
	*by_index = 0;
	if (r->mig[0])
		return r->mig;
	if (r->gpu[0])
		return r->gpu;
	buf[0] = 0;
	if (!(r->have & 1u << CK_CVD) || r->visible < 1)
		return buf;
	long at = 0;
	if (r->visible > 1) {
		char *end;
		if (!(r->have & 1u << CK_LOCAL_RANK))
			return buf;
		at = strtol(r->env[CK_LOCAL_RANK], &end, 10);
		if (*end || at < 0 || at >= r->visible)
			return buf;
	}
	const char *p = r->env[CK_CVD];
	for (long k = 0; k < at && p; k++)
		p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
	if (!p || !*p || *p == ',')
		return buf;
	snprintf(buf, len, "%.*s", (int)strcspn(p, ","), p);
	*by_index = 1;
	return buf;
}

/* The GPU sharing GRES Slurm gave the task, NULL none. */
static const char *shared_by(const struct ck_rank *r)
{
	return r->have & 1u << CK_SHARDS ? "gres/shard" : r->have & 1u << CK_MPS ? "gres/mps" : NULL;
}

static void eval_gpus(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 }, shared = { 0 };
	int any = 0, migs = 0, byidx = 0, nccl = !strcmp(w->backend, "nccl");
	const char *share = NULL;

	for (int n = 0; n < nd->n; n++) {
		int used = 0, step = 0;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			char kr[DDPENV_GPUVAL], kq[DDPENV_GPUVAL];
			int ir, iq;
			if (nd->of[i] != n)
				continue;
			if (r->step_gpus > step)
				step = r->step_gpus;
			const char *key = gpu_key(r, kr, sizeof(kr), &ir);
			if (!key[0]) {
				if (r->step_gpus > 0)
					say(nccl ? &fail : &warn, "task %d (%s) has no GPU of its own (%d task%s, %d "
					    "GPU%s there)", i, r->host, nd->count[n], nd->count[n] == 1 ? "" : "s",
					    r->step_gpus, r->step_gpus == 1 ? "" : "s");
				continue;
			}
			any++;
			migs += r->mig[0] != 0;
			byidx += ir;
			int dup = 0;
			for (int j = 0; j < i; j++) {
				const struct ck_rank *q = &w->ranks[j];
				if (nd->of[j] != n)
					continue;
				const char *qkey = gpu_key(q, kq, sizeof(kq), &iq);
				if (iq == ir && !strcasecmp(qkey, key)) {
					const char *sh = shared_by(r);
					char what[DDPENV_GPUVAL + 48];
					if (ir)
						snprintf(what, sizeof(what), "GPU %s of CUDA_VISIBLE_DEVICES", key);
					else
						snprintf(what, sizeof(what), "%s %s", r->mig[0] ? "MIG device" : "GPU", key);
					if (sh && !nccl) {
						/* what the user asked Slurm for: named
						 * once, at the GPU's first task */
						share = sh;
					} else {
						say(nccl ? &fail : &warn, "%s: %s is used by tasks %d and %d%s%s%s", r->host,
						    what, j, i, sh ? " (shares of it from " : "", sh ? sh : "",
						    sh ? ": NCCL runs one rank per GPU; use --ddp=gloo)" :
						    r->mig[0] && r->visible > 1 ? " (CUDA opens the first MIG device of "
						    "CUDA_VISIBLE_DEVICES only: run with srun --ddp, which gives each task "
						    "its own)" : "");
					}
					dup = 1;
					break;
				}
				if (nccl && r->mig[0] && q->mig[0] && r->gpu[0] && !strcasecmp(q->gpu, r->gpu)) {
					say(&fail, "%s: tasks %d and %d run on MIG devices of one GPU (%s): NCCL "
					    "does not run two ranks on one GPU; use --ddp=gloo", r->host, j, i, r->gpu);
					break;
				}
			}
			used += !dup;
			if (!dup && shared_by(r) && !nccl) {
				/* the tasks after it on the same shared GPU */
				char list[160];
				size_t off = 0;
				int sharers = 0;
				for (int j = i + 1; j < w->n; j++) {
					const struct ck_rank *q = &w->ranks[j];
					if (nd->of[j] != n || strcasecmp(gpu_key(q, kq, sizeof(kq), &iq), key) ||
					    iq != ir)
						continue;
					sharers++;
					if (off < sizeof(list))
						off += (size_t)snprintf(list + off, sizeof(list) - off, ", %d", j);
				}
				if (sharers)
					say(&shared, "%s: %s%s%s by tasks %d%s", r->host, ir ? "GPU " : r->mig[0] ?
					    "MIG device " : "GPU ", key, ir ? " of CUDA_VISIBLE_DEVICES" : "", i, list);
			}
		}
		if (step > used && used > 0)
			say(&warn, "%s: %d of the step's %d GPUs there are used by no task", nd->name[n],
			    step - used, step);
	}
	const char *idx_note = byidx ? " (GPUs named by CUDA_VISIBLE_DEVICES: no topology places "
				       "them, and CUDA was not asked or did not answer)" : "";
	if (fail.items)
		ck_add(w, "bind.gpus", CK_FAIL, "%s%s%s%s", said(&fail), warn.items ? "; " : "",
		       warn.items ? said(&warn) : "", idx_note);
	else if (warn.items)
		ck_add(w, "bind.gpus", CK_WARN, "%s%s", said(&warn), idx_note);
	else if (!any)
		ck_add(w, "bind.gpus", CK_OK, "no GPUs in this step");
	else if (shared.items)
		ck_add(w, "bind.gpus", CK_OK, "GPUs shared as %s gave them: %s%s", share, said(&shared),
		       idx_note);
	else if (migs == any)
		ck_add(w, "bind.gpus", CK_OK, "each of %d MIG devices is used by exactly one task", any);
	else
		ck_add(w, "bind.gpus", CK_OK, "each of %d GPUs is used by exactly one task%s", any, idx_note);
}

static void eval_visible(struct ck_world *w)
{
	struct msg warn = { 0 };
	int checked = 0, migs = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || r->step_gpus <= 0 || r->visible < 0)
			continue;
		checked++;
		if (r->mig[0]) {
			/* No peer access between MIG devices; CUDA opens one. */
			migs++;
			if (r->visible > 1)
				say(&warn, "task %d (%s) is shown %d MIG devices (CUDA_VISIBLE_DEVICES=%s), but "
				    "CUDA opens only the first, %s", i, r->host, r->visible, r->env[CK_CVD], r->mig);
		} else if (r->visible < r->step_gpus)
			say(&warn, "task %d (%s) sees %d of the step's %d GPUs there: no CUDA peer access "
			    "(NVLink, P2P) to the others' GPUs (CUDA_VISIBLE_DEVICES=%s, narrowed by "
			    "--gpu-bind or --ddp-bind=strict?)", i, r->host, r->visible, r->step_gpus,
			    r->env[CK_CVD]);
	}
	if (warn.items)
		ck_add(w, "bind.visible", CK_WARN, "%s", said(&warn));
	else if (!checked)
		ck_add(w, "bind.visible", CK_OK, "no GPUs in this step");
	else if (migs == checked)
		ck_add(w, "bind.visible", CK_OK, "every task sees its own MIG device only (CUDA opens one "
		       "MIG device per process, and MIG devices have no peer access)");
	else
		ck_add(w, "bind.visible", CK_OK, "every task sees all of its node's GPUs of the step "
		       "(peer access possible)%s", migs ? "; the tasks on MIG devices, their own" : "");
}

static int by_busid(const void *a, const void *b)
{
	return strcasecmp(((const struct ddpenv_nvgpu *)a)->busid, ((const struct ddpenv_nvgpu *)b)->busid);
}

/* One node's driver table against bus order: whether the device numbers
 * rise with the bus ids.  Only the order is checked, not that /dev/nvidiaN
 * is exactly the N-th GPU: a container (pyxis, enroot) lists only the
 * GPUs it was given, and a hole in the numbers alone is no error.  out:
 * "0000:1b:00.0 is /dev/nvidia1, 0000:43:00.0 is /dev/nvidia0, ..." in bus
 * order. */
static int misordered(const struct ddpenv_nvgpu *g, int ng, char *out, size_t len)
{
	struct ddpenv_nvgpu s[DDPENV_MAX_GPUS];
	size_t off = 0;
	int bad = 0;
	int ns = 0;
	for (int k = 0; k < ng; k++)   /* CUDA does not count excluded GPUs */
		if (!g[k].excluded)
			s[ns++] = g[k];
	ng = ns;
	qsort(s, (size_t)ng, sizeof(*s), by_busid);
	out[0] = 0;
	for (int k = 1; k < ng; k++)
		bad += s[k].minor < s[k - 1].minor;
	for (int k = 0; bad && k < ng && k < 8 && off < len; k++)
		off += (size_t)snprintf(out + off, len - off, "%s%s is /dev/nvidia%d", k ? ", " : "",
					s[k].busid, s[k].minor);
	if (bad && ng > 8 && off < len)
		snprintf(out + off, len - off, ", and %d more", ng - 8);
	return bad;
}

/* Slurm's GPU numbers against the NVIDIA driver's list.  Slurm's GPU k
 * (SLURM_STEP_GPUS; CUDA_VISIBLE_DEVICES too without ConstrainDevices) is
 * the k-th of slurmd's GPU list: in bus order with AutoDetect=nvml, in
 * File= order (by device minor) from a hand-written gres.conf, as the
 * site told the plugin (gres_order).  CUDA under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID counts in bus order.  Where the two
 * differ, a task can drive another GPU than Slurm gave it. */
static void eval_gres(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	int nccl = !strcmp(w->backend, "nccl"), tables = 0, gpus = 0, checked = 0, planned = 0, migs = 0;
	char busorder[CK_HOST * 2] = "", partial[CK_HOST * 2] = "";

	/* Under nccl CUDA said which GPU each task opened: the one the plugin
	 * planned (DDP_GPU_BUSID), near which it bound the task's CPUs? */
	for (int i = 0; nccl && i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined || !r->gpu[0] || !has(r, CK_GPU_BUSID) || strncmp(r->gpu_from, "CUDA", 4))
			continue;
		planned++;
		if (strcasecmp(r->gpu, r->env[CK_GPU_BUSID]))
			say(&fail, "task %d (%s) opened GPU %s (%s), but slurm-ddp planned %s (DDP_GPU_BUSID) "
			    "and bound its CPUs near that one: CUDA_VISIBLE_DEVICES=%s names other GPUs "
			    "than the plan (set by hand, or Slurm numbers its GPUs otherwise than gres_order "
			    "%s says: minor for a gres.conf listing File=/dev/nvidia[0-N], bus for "
			    "AutoDetect=nvml)", i, r->host, r->gpu, r->gpu_from, r->env[CK_GPU_BUSID],
			    has(r, CK_CVD) ? r->env[CK_CVD] : "(unset)",
			    ddpenv_gres_order_name((enum ddpenv_gres_order)r->gres_order));
	}

	for (int n = 0; n < nd->n; n++) {
		const struct ck_rank *t = NULL;
		struct ddpenv_nvgpu g[DDPENV_MAX_GPUS];
		const struct ddpenv_nvgpu *slurm[DDPENV_MAX_GPUS];
		int ng;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n)
				continue;
			gpus |= r->gpu[0] || r->step_gpus > 0;
			migs += r->mig[0] != 0;
			if (!t && (r->nvgpus[0] || r->nvgpus_err[0]))
				t = r;
		}
		if (!t)
			continue;
		if (!t->nvgpus[0] || (ng = ck_nvidia_parse(t->nvgpus, g, DDPENV_MAX_GPUS)) <= 0) {
			say(&warn, "%s: the NVIDIA driver's GPU list could not be read: %s", nd->name[n],
			    t->nvgpus_err[0] ? t->nvgpus_err : t->nvgpus);
			continue;
		}
		tables++;
		/* A container (pyxis, enroot) shows only its own GPUs: device
		 * numbers with holes, which Slurm's node-wide numbers do not
		 * index. */
		int dense = 1;
		for (int k = 0; k < ng; k++)
			dense &= g[k].minor == k;
		if (!dense) {
			if (!partial[0])
				snprintf(partial, sizeof(partial), "%s", nd->name[n]);
			continue;
		}
		enum ddpenv_gres_order order = (enum ddpenv_gres_order)t->gres_order;
		size_t ns = ddpenv_nvidia_slurm_order(g, (size_t)ng, order, slurm, DDPENV_MAX_GPUS);
		char list[400];
		if (misordered(g, ng, list, sizeof(list))) {
			if (order == DDPENV_GRES_ORDER_MINOR)
				say(&warn, "%s: gres_order minor, and the NVIDIA driver's device numbers do not follow "
				    "PCI bus order (%s): Slurm's GPU numbers (SLURM_STEP_GPUS, and "
				    "CUDA_VISIBLE_DEVICES without ConstrainDevices=yes) mean other GPUs to CUDA "
				    "(CUDA_DEVICE_ORDER=PCI_BUS_ID) than to Slurm; srun --ddp writes "
				    "CUDA_VISIBLE_DEVICES as CUDA counts, steps without it get Slurm's numbers "
				    "(list the files in bus order in gres.conf, or use AutoDetect=nvml and "
				    "gres_order: bus)", nd->name[n], list);
			else if (!busorder[0])
				snprintf(busorder, sizeof(busorder), "%s", nd->name[n]);
		}
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n)
				continue;
			/* Slurm's GRES numbers count MIG devices, not GPUs. */
			if (!r->gpu[0] || !has(r, CK_STEP_GPUS) || r->mig[0])
				continue;
			char ids[DDPENV_VALLEN], busids[400] = "";
			size_t off = 0;
			int mine = 0;
			long past = -1;
			snprintf(ids, sizeof(ids), "%s", r->env[CK_STEP_GPUS]);
			for (char *sv = NULL, *tok = strtok_r(ids, ",", &sv); tok; tok = strtok_r(NULL, ",", &sv)) {
				char *end;
				long k = strtol(tok, &end, 10);
				if (end == tok || *end || k < 0) {
					past = -2;
					break;
				}
				if ((size_t)k >= ns) {
					past = k;
					break;
				}
				mine |= !strcasecmp(slurm[k]->busid, r->gpu);
				if (off < sizeof(busids))
					off += (size_t)snprintf(busids + off, sizeof(busids) - off, "%s%s (/dev/nvidia%d)",
								off ? ", " : "", slurm[k]->busid, slurm[k]->minor);
			}
			if (past != -1) {
				if (past >= 0)
					say(&warn, "task %d (%s): SLURM_STEP_GPUS=%s names GPU %ld, but the NVIDIA driver "
					    "there lists %zu GPUs CUDA can open", i, r->host, r->env[CK_STEP_GPUS],
					    past, ns);
				else
					say(&warn, "task %d (%s): SLURM_STEP_GPUS=%s is not a list of GPU numbers",
					    i, r->host, r->env[CK_STEP_GPUS]);
				continue;
			}
			checked++;
			if (!mine)
				say(nccl ? &fail : &warn, "task %d (%s) uses GPU %s%s%s%s, not one of the "
				    "step's: SLURM_STEP_GPUS=%s is %s in gres_order %s", i, r->host, r->gpu,
				    r->gpu_from[0] ? " (from " : "", r->gpu_from, r->gpu_from[0] ? ")" : "",
				    r->env[CK_STEP_GPUS], busids, ddpenv_gres_order_name(order));
		}
	}
	if (fail.items)
		ck_add(w, "bind.gres", CK_FAIL, "%s%s%s", said(&fail), warn.items ? "; " : "",
		       warn.items ? said(&warn) : "");
	else if (warn.items)
		ck_add(w, "bind.gres", CK_WARN, "%s", said(&warn));
	else if (migs && !checked)
		ck_add(w, "bind.gres", CK_OK, "the step's GPUs are MIG devices, which Slurm names by UUID: "
		       "its GRES numbers count MIG devices, not GPUs, and are not checked against PCI bus ids");
	else if (tables && partial[0] && !checked)
		ck_add(w, "bind.gres", CK_OK, "the NVIDIA driver lists only some GPUs, with holes in their "
		       "device numbers, on %s%s (a container's own GPUs?): Slurm's node-wide GPU numbers are not "
		       "checked against them%s", partial, tables > 1 ? " and others" : "",
		       planned ? "; each task opened the GPU planned for it" : "");
	else if (tables && busorder[0])
		ck_add(w, "bind.gres", CK_OK, "Slurm's GPU numbers taken in PCI bus order (gres_order bus, "
		       "as AutoDetect=nvml numbers them) on %d node%s, where the NVIDIA driver's device numbers "
		       "do not follow bus order (%s%s: a gres.conf listing File=/dev/nvidia[0-N] there needs "
		       "gres_order: minor)%s%s", tables, tables == 1 ? "" : "s", busorder,
		       tables > 1 ? ", ..." : "",
		       checked ? "; every task's GPU is one Slurm gave the step" : "",
		       planned ? "; each task opened the GPU planned for it" : "");
	else if (tables)
		ck_add(w, "bind.gres", CK_OK, "the NVIDIA driver's device numbers follow PCI bus order on %d "
		       "node%s%s%s%s%s%s", tables, tables == 1 ? "" : "s",
		       checked ? ", and every task's GPU is one Slurm gave the step" : "",
		       partial[0] ? " (not checked on " : "", partial, partial[0] ? ": a container's partial list?)" : "",
		       planned ? "; each task opened the GPU planned for it" : "");
	else if (!gpus)
		ck_add(w, "bind.gres", CK_OK, "no GPUs in this step");
	else if (planned)
		ck_add(w, "bind.gres", CK_OK, "each task opened the GPU planned for it (DDP_GPU_BUSID); no "
		       "node has the NVIDIA driver's GPU list (%s) to check Slurm's numbers with",
		       DDPENV_NVIDIA_GPUS);
	else
		ck_add(w, "bind.gres", CK_SKIP, "no node has the NVIDIA driver's GPU list (%s): Slurm's "
		       "GPU numbers were not checked against PCI bus ids", DDPENV_NVIDIA_GPUS);
}

static void eval_backend(struct ck_world *w)
{
	struct msg fail = { 0 };
	int lo = 0, hi = 0;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined)
			continue;
		if (r->backend_err[0])
			say(&fail, "task %d (%s): %s", i, r->host, r->backend_err);
		if (r->nccl_version && (!lo || r->nccl_version < lo))
			lo = r->nccl_version;
		if (r->nccl_version > hi)
			hi = r->nccl_version;
	}
	if (fail.items)
		ck_add(w, "coll.backend", CK_FAIL, "%s", said(&fail));
	else if (strcmp(w->backend, "nccl"))
		ck_add(w, "coll.backend", CK_OK, "%s on every task", w->backend);
	else if (lo != hi)
		ck_add(w, "coll.backend", CK_WARN, "NCCL versions differ between tasks: %d.%d.%d to %d.%d.%d "
		       "(mixed versions may not interoperate)", lo / 10000, lo / 100 % 100, lo % 100,
		       hi / 10000, hi / 100 % 100, hi % 100);
	else
		ck_add(w, "coll.backend", CK_OK, "NCCL %d.%d.%d and a GPU on every task", lo / 10000,
		       lo / 100 % 100, lo % 100);
}

void ck_eval_setup(struct ck_world *w)
{
	struct nodes nd;

	if (nodes_build(w, &nd) < 0) {
		ck_add(w, "ddp-check", CK_FAIL, "out of memory evaluating %d tasks", w->n);
		nodes_free(&nd);
		return;
	}
	eval_join(w);
	eval_present(w);
	eval_rank(w);
	eval_world(w);
	eval_same(w, "env.master", CK_MASTER_ADDR, CK_MASTER_PORT);
	eval_local(w, &nd);
	eval_node_rank(w, &nd);
	eval_head(w, &nd);
	eval_iface(w, &nd);
	eval_kind(w, &nd);
	eval_probe(w, &nd);
	eval_clock(w, &nd);
	eval_cpus(w, &nd);
	eval_locality(w);
	eval_gpus(w, &nd);
	eval_visible(w);
	eval_gres(w, &nd);
	eval_backend(w);
	nodes_free(&nd);
}

int ck_coll_safe(const struct ck_world *w, char *why, size_t len)
{
	static const char *const needed[] = { "rdzv.join", "net.iface", "net.probe", "bind.gpus",
					      "coll.backend" };

	for (size_t i = 0; i < w->nres; i++)
		for (size_t k = 0; k < sizeof(needed) / sizeof(needed[0]); k++)
			if (w->res[i].level == CK_FAIL && !strcmp(w->res[i].name, needed[k])) {
				snprintf(why, len, "not run: %s failed, so the collective could only hang until "
					 "its timeout", needed[k]);
				return 0;
			}
	return 1;
}

double ck_busbw(double algbw, int n)
{
	return n > 0 ? algbw * 2.0 * (n - 1) / n : 0;
}

double ck_time_max(const struct ck_world *w, size_t k)
{
	double t = -1;

	for (int i = 0; i < w->n; i++)
		if (w->colls[i].have && k < w->colls[i].ntimes && w->colls[i].times[k] > t)
			t = w->colls[i].times[k];
	return t;
}

void ck_eval_coll(struct ck_world *w)
{
	if (!w->coll_ran) {
		ck_add(w, "coll.allreduce", CK_SKIP, "%s", w->coll_skip);
		ck_add(w, "coll.busbw", CK_SKIP, "%s", w->coll_skip);
		ck_add(w, "time.first_collective", CK_SKIP, "%s", w->coll_skip);
		return;
	}
	struct msg fail = { 0 };
	double first = -1, init = 0;
	int slow = -1;
	for (int i = 0; i < w->n; i++) {
		const struct ck_coll *c = &w->colls[i];
		if (!c->have)
			say(&fail, "task %d (%s) did not report its result", i, w->ranks[i].host);
		else if (!c->ok)
			say(&fail, "task %d (%s): %s", i, w->ranks[i].host, c->msg);
		else if (c->first_s > first) {
			first = c->first_s;
			init = c->init_s;
			slow = i;
		}
	}
	if (fail.items)
		ck_add(w, "coll.allreduce", CK_FAIL, "%s", said(&fail));
	else
		ck_add(w, "coll.allreduce", CK_OK, "%s all-reduce of crafted inputs exact on all %d tasks "
		       "(%s)", w->backend, w->n, w->colls[0].msg);

	if (w->nsizes == 0) {
		ck_add(w, "coll.busbw", CK_SKIP, "no sizes to sweep (-e 0)");
	} else {
		size_t k = w->nsizes - 1;
		double t = ck_time_max(w, k);
		if (t <= 0) {
			ck_add(w, "coll.busbw", fail.items ? CK_SKIP : CK_FAIL, "no time measured at %zu bytes",
			       w->sizes[k]);
		} else {
			double bus = ck_busbw((double)w->sizes[k] / t / 1e9, w->n);
			if (w->opts.min_busbw > 0 && bus < w->opts.min_busbw)
				ck_add(w, "coll.busbw", CK_FAIL, "busbw %.2f GB/s at %zu bytes is below "
				       "--min-busbw %.2f GB/s", bus, w->sizes[k], w->opts.min_busbw);
			else
				ck_add(w, "coll.busbw", CK_OK, "busbw %.2f GB/s at %zu bytes%s", bus, w->sizes[k],
				       w->opts.min_busbw > 0 ? " (at least --min-busbw)" : "");
		}
	}
	if (slow >= 0)
		ck_add(w, "time.first_collective", CK_OK, "%.3f s from task start to the first completed "
		       "all-reduce (slowest: task %d on %s; its communicator set-up took %.3f s)", first,
		       slow, w->ranks[slow].host, init);
	else
		ck_add(w, "time.first_collective", CK_SKIP, "no task completed an all-reduce");
}
