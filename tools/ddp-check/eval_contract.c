/* ddp-check's contract checks: every variable present on every task, RANK
 * a permutation, WORLD_SIZE and the head the same everywhere, LOCAL_RANK
 * and NODE_RANK consistent with the nodes, the head on rank 0's node. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"

static void eval_join(struct ck_world *w)
{
	struct msg m = { 0 }, died = { 0 }, left = { 0 };
	int missing = 0;
	const struct ck_rank *r0 = NULL;

	for (int i = 0; i < w->n; i++) {
		if (!w->ranks[i].joined) {
			int gone = w->gone ? w->gone[i] : CK_GONE_NO;
			missing++;
			ck_say(gone == CK_GONE_DIED ? &died : gone == CK_GONE_LEFT ? &left : &m, "%d", i);
		} else if (!r0) {
			r0 = &w->ranks[i];
		}
	}
	const char *addr = r0 && ck_has(r0, CK_MASTER_ADDR) ? r0->env[CK_MASTER_ADDR] : "?";
	const char *port = r0 && ck_has(r0, CK_MASTER_PORT) ? r0->env[CK_MASTER_PORT] : "?";
	char at[DDPENV_VALLEN + 16];
	/* an IPv6 address in brackets, so the port stays apart */
	snprintf(at, sizeof(at), strchr(addr, ':') ? "[%s]:%s" : "%s:%s", addr, port);
	/* one ddp-check everywhere: an older one's record lacks what the
	 * newer checks read (a node upgraded before the others) */
	int other = -1;
	for (int i = 0; r0 && i < w->n && other < 0; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (r->joined && (r->proto != r0->proto || strcmp(r->version, r0->version)))
			other = i;
	}
	if (!missing && other >= 0)
		ck_add(w, "rdzv.join", CK_WARN, "all %d tasks joined the rendezvous at %s, but run different "
		       "ddp-check versions: %s (record format %d) on task %d (%s), %s (%d) on task %d (%s): "
		       "install one version on every node; the checks an older one cannot answer are "
		       "left out for its tasks", w->n, at, r0->version[0] ? r0->version : "older", r0->proto,
		       r0->id, r0->host, w->ranks[other].version[0] ? w->ranks[other].version : "older",
		       w->ranks[other].proto, other, w->ranks[other].host);
	else if (!missing)
		ck_add(w, "rdzv.join", CK_OK, "all %d tasks joined the rendezvous at %s", w->n, at);
	else {
		/* never joined (task 0 waited --timeout for them); joined the
		 * store, then closed it before their record (task 0 stopped
		 * waiting once every task had sent its record or gone) */
		struct msg all = { 0 };
		int nm = m.items + m.dropped, nd = died.items + died.dropped, nl = left.items + left.dropped;
		if (nm)
			ck_say(&all, "task%s %s (of %d) never joined the rendezvous at %s within %d s; each "
			    "prints its own reason on its stderr (a different MASTER_ADDR or MASTER_PORT, "
			    "no route to the head, a wrong DDP_RDZV_TOKEN)%s%s", nm > 1 ? "s" : "", ck_said(&m),
			    w->n, at, w->opts.timeout_s, w->refused[0] ? "; the rendezvous " : "", w->refused);
		if (nd)
			ck_say(&all, "task%s %s (of %d) connected to the rendezvous at %s, then died before %s "
			    "record (killed, or crashed)", nd > 1 ? "s" : "", ck_said(&died), w->n, at,
			    nd > 1 ? "they sent their" : "it sent its");
		if (nl)
			ck_say(&all, "task%s %s (of %d) connected to the rendezvous at %s, then stopped on an error "
			    "of %s own before %s record (%s)", nl > 1 ? "s" : "", ck_said(&left), w->n, at,
			    nl > 1 ? "their" : "its", nl > 1 ? "they sent their" : "it sent its",
			    nl > 1 ? "each one's stderr says which" : "its stderr says which");
		ck_add(w, "rdzv.join", CK_FAIL, "%s", ck_said(&all));
	}
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
			if (!ck_has(r, k) || !r->env[k][0])
				off += (size_t)snprintf(lack + off, sizeof(lack) - off, "%s%s", off ? " " : "",
							ck_env_names[k]);
		if (off)
			ck_say(&m, "task %d (%s) lacks %s", i, r->host, lack);
	}
	if (m.items)
		ck_add(w, "env.present", CK_FAIL, "%s (run it with srun --ddp, or set them all)", ck_said(&m));
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
		if (!ck_has(&w->ranks[i], k) || seen[i])
			continue;
		int cnt = 0;
		for (int j = i; j < w->n; j++)
			if (ck_has(&w->ranks[j], k) && !strcmp(w->ranks[j].env[k], w->ranks[i].env[k])) {
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
		if (!r->joined || !ck_has(r, CK_RANK))
			continue;
		if (!ck_intval(r, CK_RANK, &v) || v >= w->n) {
			ck_say(&m, "task %d (%s) has RANK=%s, expected 0..%d", i, r->host, r->env[CK_RANK], w->n - 1);
		} else if (owner[v] >= 0) {
			ck_say(&m, "RANK=%ld on both task %d (%s) and task %d (%s)", v, owner[v],
			    w->ranks[owner[v]].host, i, r->host);
		} else {
			owner[v] = i;
		}
	}
	if (!m.items && ck_all_joined(w)) {
		for (int v = 0; v < w->n; v++)
			if (owner[v] < 0)
				ck_say(&m, "no task has RANK=%d", v);
	}
	free(owner);
	if (m.items)
		ck_add(w, "env.rank", CK_FAIL, "%s", ck_said(&m));
	else
		ck_add(w, "env.rank", CK_OK, "RANK 0..%d, each on one task", w->n - 1);
}

static void eval_local(struct ck_world *w, const struct nodes *nd)
{
	struct msg m = { 0 };
	int complete = ck_all_joined(w);

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
			if (ck_has(r, CK_LOCAL_RANK) && (!ck_intval(r, CK_LOCAL_RANK, &v) || (complete && v >= cnt)))
				ck_say(&m, "task %d (%s) has LOCAL_RANK=%s, expected 0..%d (%d tasks there)", i,
				    r->host, r->env[CK_LOCAL_RANK], cnt - 1, cnt);
			else if (ck_has(r, CK_LOCAL_RANK) && v <= cnt && seen[v]++)
				ck_say(&m, "LOCAL_RANK=%ld twice on %s (task %d and another)", v, r->host, i);
			if (complete && ck_has(r, CK_LOCAL_WORLD_SIZE) &&
			    (!ck_intval(r, CK_LOCAL_WORLD_SIZE, &lw) || lw != cnt))
				ck_say(&m, "task %d (%s) has LOCAL_WORLD_SIZE=%s, but %d tasks run there", i,
				    r->host, r->env[CK_LOCAL_WORLD_SIZE], cnt);
		}
		free(seen);
	}
	if (m.items)
		ck_add(w, "env.local_rank", CK_FAIL, "%s", ck_said(&m));
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
		if (n < 0 || !ck_has(r, CK_NODE_RANK))
			continue;
		if (!ck_intval(r, CK_NODE_RANK, &v) || (ck_all_joined(w) && v >= nd->n)) {
			ck_say(&m, "task %d (%s) has NODE_RANK=%s, expected 0..%d", i, r->host,
			    r->env[CK_NODE_RANK], nd->n - 1);
		} else if (val[n] < 0) {
			val[n] = v;
		} else if (val[n] != v) {
			ck_say(&m, "tasks on %s disagree: NODE_RANK=%ld and %ld (task %d)", r->host, val[n], v, i);
		}
	}
	for (int a = 0; a < nd->n; a++)
		for (int b = a + 1; b < nd->n; b++)
			if (val[a] >= 0 && val[a] == val[b])
				ck_say(&m, "NODE_RANK=%ld on both %s and %s", val[a], nd->name[a], nd->name[b]);
	free(val);
	if (m.items)
		ck_add(w, "env.node_rank", CK_FAIL, "%s", ck_said(&m));
	else
		ck_add(w, "env.node_rank", CK_OK, "NODE_RANK the same within each node, distinct across %d",
		       nd->n);
}

static void eval_head(struct ck_world *w, const struct nodes *nd)
{
	const struct ck_rank *r0 = NULL;

	for (int i = 0; i < w->n && !r0; i++) {
		long v;
		if (ck_intval(&w->ranks[i], CK_RANK, &v) && v == 0)
			r0 = &w->ranks[i];
	}
	if (!r0) {
		ck_add(w, "env.head", CK_SKIP, "no task with RANK=0 reported");
		return;
	}
	const char *ma = r0->env[CK_MASTER_ADDR];
	struct ddpenv_addr a;
	if (!ck_has(r0, CK_MASTER_ADDR)) {
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

/* NAME's value in a rank's "NAME=value;..." list into val: 1, or 0 unset. */
static int nccl_get(const char *list, const char *name, char *val, size_t len)
{
	size_t nl = strlen(name);

	for (const char *s = list; s && *s;) {
		const char *e = strchr(s, ';');
		size_t l = e ? (size_t)(e - s) : strlen(s);
		if (l > nl && !strncmp(s, name, nl) && s[nl] == '=') {
			snprintf(val, len, "%.*s", (int)(l - nl - 1), s + nl + 1);
			return 1;
		}
		s = e ? e + 1 : s + l;
	}
	return 0;
}

/* Under NCCL, its variables as each task has them (but the per-node
 * ones: self.c's nccl_local).  NCCL reads them on each rank: ranks that
 * disagree (NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE, channel counts) can
 * choose different algorithms or buffers and hang; and a transport
 * switched off (P2P, shared memory, InfiniBand where the node has it),
 * often left from debugging, costs bandwidth without a word. */
static void eval_nccl_env(struct ck_world *w)
{
	static const char *const off[] = { "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE" };
	struct msg warn = { 0 };
	char names[32][48], set[512] = "";
	int nn = 0, first = -1;
	size_t so = 0;

	if (strcmp(w->backend, "nccl") != 0) {
		ck_add(w, "env.nccl", CK_OK, "%s: NCCL's variables do not apply", w->backend);
		return;
	}
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		/* an older ddp-check's record has no nccl_env */
		if (!r->joined || r->proto < 2)
			continue;
		if (first < 0)
			first = i;
		for (const char *s = r->nccl_env; *s;) {
			size_t l = strcspn(s, "=;");
			int k = 0;
			while (k < nn && (strlen(names[k]) != l || strncmp(names[k], s, l)))
				k++;
			if (k == nn && nn < 32 && l < sizeof(names[0]))
				snprintf(names[nn++], sizeof(names[0]), "%.*s", (int)l, s);
			s += strcspn(s, ";");
			s += *s == ';';
		}
	}
	if (first < 0) {
		ck_add(w, "env.nccl", CK_SKIP, "no task reported its variables (an older ddp-check?)");
		return;
	}
	for (int k = 0; k < nn; k++) {
		char v0[256], v[256];
		int h0 = nccl_get(w->ranks[first].nccl_env, names[k], v0, sizeof(v0)), odd = -1, nodd = 0;
		int is_off = 0;
		for (size_t j = 0; j < sizeof(off) / sizeof(off[0]); j++)
			is_off |= !strcmp(names[k], off[j]);
		for (int i = first + 1; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			int h = r->joined && nccl_get(r->nccl_env, names[k], v, sizeof(v));
			if (!r->joined || r->proto < 2 || (h == h0 && (!h || !strcmp(v, v0))))
				continue;
			if (odd < 0)
				odd = i;
			nodd++;
		}
		if (odd >= 0 && is_off) {
			/* said below, where it costs */
		} else if (odd >= 0) {
			int h = nccl_get(w->ranks[odd].nccl_env, names[k], v, sizeof(v));
			ck_say(&warn, "%s differs between tasks: %s%s%s on task %d (%s), %s%s%s on task %d (%s)%s",
			    names[k], h0 ? "'" : "", h0 ? v0 : "unset", h0 ? "'" : "", first,
			    w->ranks[first].host, h ? "'" : "", h ? v : "unset", h ? "'" : "", odd,
			    w->ranks[odd].host, nodd > 1 ? " and others" : "");
		} else if (h0 && so < sizeof(set)) {
			so += (size_t)snprintf(set + so, sizeof(set) - so, "%s%s=%s", so ? " " : "", names[k], v0);
		}
	}
	for (size_t k = 0; k < sizeof(off) / sizeof(off[0]); k++) {
		int who = -1, many = 0;
		char v[64] = "";
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			char x[64];
			/* InfiniBand off where there is none is no loss */
			if (!r->joined || !nccl_get(r->nccl_env, off[k], x, sizeof(x)) || !strcmp(x, "0") ||
			    (k == 2 && !r->rdma[0]))
				continue;
			if (who < 0) {
				who = i;
				snprintf(v, sizeof(v), "%s", x);
			} else {
				many++;
			}
		}
		if (who >= 0)
			ck_say(&warn, "%s=%s on task %d (%s)%s switches %s off: every collective takes a "
			    "slower path (a debugging setting left in a profile or batch script?)", off[k], v,
			    who, w->ranks[who].host, many ? " and others" : "",
			    k == 0 ? "NVLink and PCIe peer-to-peer" : k == 1 ? "shared memory between a node's ranks" :
			    "InfiniBand and RoCE");
	}
	if (warn.items)
		ck_add(w, "env.nccl", CK_WARN, "%s", ck_said(&warn));
	else if (set[0])
		ck_add(w, "env.nccl", CK_OK, "the same on every task: %s", set);
	else
		ck_add(w, "env.nccl", CK_OK, "no NCCL variable set (the per-node ones aside)");
}

void ck_eval_contract(struct ck_world *w, const struct nodes *nd)
{
	eval_join(w);
	eval_present(w);
	eval_rank(w);
	eval_world(w);
	eval_same(w, "env.master", CK_MASTER_ADDR, CK_MASTER_PORT);
	eval_local(w, nd);
	eval_node_rank(w, nd);
	eval_head(w, nd);
	eval_nccl_env(w);
}
