/* ddp-check's verdicts on the hardware links, from what each task read of
 * its node's sysfs (hw.h): hw.pcie (the task's GPU and NIC at their PCIe
 * link's full width and speed) and net.fabric (the RDMA ports NCCL would
 * use active, at one rate on every node, NCCL_IB_HCA and DDP_NIC naming
 * devices that are there). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "eval.h"

/* ---- hw.pcie -------------------------------------------------------------- */

struct pcie {
	struct msg fail, warn, idle, unread;
	int links;
	char (*seen)[CK_HOST + 24];      /* "node busid" already judged */
	int nseen;
};

static int seen_before(struct pcie *s, const char *host, const struct ck_link *l)
{
	char key[CK_HOST + 24];
	snprintf(key, sizeof(key), "%s %s", host, l->busid[0] ? l->busid : l->name);
	for (int i = 0; i < s->nseen; i++)
		if (!strcmp(s->seen[i], key))
			return 1;
	snprintf(s->seen[s->nseen++], sizeof(s->seen[0]), "%s", key);
	return 0;
}

/* One link of a task: its width and speed against their maxima. */
static void pcie_link(struct pcie *s, const struct ck_rank *r, const struct ck_link *l, int gpu)
{
	const char *what = gpu ? "GPU" : "NIC";
	if (!l->name[0] || seen_before(s, r->host, l))
		return;
	if (l->err[0]) {
		ck_say(&s->unread, "%s %s: %s", r->host, what, l->err);
		return;
	}
	s->links++;
	double cur = ck_link_gts(l->cur_speed), max = ck_link_gts(l->max_speed);
	char dev[64];
	snprintf(dev, sizeof(dev), "%s%s%s", gpu ? "" : l->name, gpu ? "" : " ", l->busid);
	if (l->max_width > 0 && l->cur_width < l->max_width)
		ck_say(&s->fail, "%s: %s %s at x%d of x%d (%s of %s): a degraded link, its bandwidth to the "
		       "host cut to %d%% (reseat the card, check its slot or riser)", r->host, what, dev,
		       l->cur_width, l->max_width, l->cur_speed, l->max_speed, l->cur_width * 100 / l->max_width);
	else if (cur > 0 && max > 0 && cur < max && gpu)
		ck_say(&s->idle, "%s's GPU %s at %s of %s", r->host, l->busid, l->cur_speed, l->max_speed);
	else if (cur > 0 && max > 0 && cur < max)
		ck_say(&s->warn, "%s: NIC %s %s trained at %s of %s (x%d): a slot or riser of an older "
		       "generation, or a link that retrained lower", r->host, l->name, l->busid, l->cur_speed,
		       l->max_speed, l->cur_width);
}

static void eval_pcie(struct ck_world *w)
{
	static struct pcie s;
	memset(&s, 0, sizeof(s));
	s.seen = calloc((size_t)w->n * 2 + 1, sizeof(*s.seen));
	if (!s.seen) {
		ck_add(w, "hw.pcie", CK_SKIP, "out of memory judging %d tasks' links", w->n);
		return;
	}
	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (!r->joined)
			continue;
		if (r->gpu[0])
			pcie_link(&s, r, &r->gpu_link, 1);
		pcie_link(&s, r, &r->nic_link, 0);
	}
	free(s.seen);
	const char *idle = s.idle.items ? ck_said(&s.idle) : "";
	const char *idle_note = s.idle.items ? " (GPUs lower their link speed while idle: " : "";
	if (s.fail.items)
		ck_add(w, "hw.pcie", CK_FAIL, "%s%s%s", ck_said(&s.fail), s.warn.items ? "; " : "",
		       s.warn.items ? ck_said(&s.warn) : "");
	else if (s.warn.items)
		ck_add(w, "hw.pcie", CK_WARN, "%s", ck_said(&s.warn));
	else if (s.links)
		ck_add(w, "hw.pcie", CK_OK, "%d PCIe link%s of the step's GPUs and NICs at full width%s%s%s%s%s",
		       s.links, s.links == 1 ? "" : "s", idle_note, idle, s.idle.items ? ")" : "",
		       s.unread.items ? "; not read: " : "", s.unread.items ? ck_said(&s.unread) : "");
	else if (s.unread.items)
		ck_add(w, "hw.pcie", CK_OK, "no PCIe link read: %s", ck_said(&s.unread));
	else
		ck_add(w, "hw.pcie", CK_OK, "no GPU, and no NIC named (DDP_NIC): no PCIe link to check");
}

/* ---- net.fabric ----------------------------------------------------------- */

/* One RDMA port of a node's list ("mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand"). */
struct port {
	char dev[32], port[8], state[24], rate[48], layer[24];
};

static int ports_parse(const char *s, struct port *p, int max)
{
	int n = 0;
	while (*s && n < max) {
		size_t l = strcspn(s, ";");
		char one[160];
		snprintf(one, sizeof(one), "%.*s", (int)l, s);
		struct port *q = &p[n];
		memset(q, 0, sizeof(*q));
		if (sscanf(one, "%31[^/]/%7[^:]:%23[^:]:%47[^:]:%23[^;]", q->dev, q->port, q->state, q->rate,
			   q->layer) >= 3)
			n++;
		s += l + (s[l] == ';');
	}
	return n;
}

/* Whether NCCL_IB_HCA (as NCCL reads it: a leading ^ excludes, = matches
 * whole names, else each entry is a prefix; ":port" picks a port) takes
 * this port. */
static int hca_takes(const char *hca, const struct port *p)
{
	int exclude = 0, exact = 0, hit = 0;
	if (!hca || !*hca)
		return 1;
	if (*hca == '^')
		exclude = 1, hca++;
	if (*hca == '=')
		exact = 1, hca++;
	char list[DDPENV_VALLEN];
	snprintf(list, sizeof(list), "%s", hca);
	for (char *sv = NULL, *e = strtok_r(list, ",", &sv); e && !hit; e = strtok_r(NULL, ",", &sv)) {
		char *colon = strchr(e, ':');
		if (colon) {
			*colon = 0;
			if (strcmp(colon + 1, p->port))
				continue;
		}
		hit = exact ? !strcmp(e, p->dev) : !strncmp(e, p->dev, strlen(e));
	}
	return exclude ? !hit : hit;
}

/* A rate's Gb/s ("200 Gb/sec (4X HDR)"), 0 unknown. */
static double gbps(const char *rate)
{
	return strtod(rate, NULL);
}

struct fabric {
	struct msg bad, down, names;
	int nodes_with, nccl;
	double least, most;              /* the used ports' rates over the nodes */
	char least_at[CK_HOST], least_rate[48], most_rate[48];
	int ports_up;
};

/* A node's ports: those NCCL would use active, their least rate; the
 * devices NCCL_IB_HCA and DDP_NIC name there. */
static void fabric_node(struct fabric *f, const struct ck_rank *r)
{
	static struct port p[64];
	int np = ports_parse(r->ibports, p, 64);
	const char *hca = ck_has(r, CK_NCCL_IB_HCA) ? r->env[CK_NCCL_IB_HCA] : NULL;
	int used = 0, nic_found = !ck_has(r, CK_NIC) || !r->env[CK_NIC][0];
	double least = 0;
	char least_rate[48] = "";

	if (np)
		f->nodes_with++;
	for (int i = 0; i < np; i++) {
		if (ck_has(r, CK_NIC) && !strcmp(p[i].dev, r->env[CK_NIC])) {
			nic_found = 1;
			if (strcmp(p[i].state, "ACTIVE"))
				ck_say(&f->down, "%s: DDP_NIC %s port %s is %s", r->host, p[i].dev, p[i].port, p[i].state);
		}
		if (!hca_takes(hca, &p[i]))
			continue;
		used++;
		if (strcmp(p[i].state, "ACTIVE")) {
			ck_say(&f->down, "%s: %s port %s is %s", r->host, p[i].dev, p[i].port, p[i].state);
			continue;
		}
		f->ports_up++;
		double g = gbps(p[i].rate);
		if (g > 0 && (least == 0 || g < least)) {
			least = g;
			snprintf(least_rate, sizeof(least_rate), "%s", p[i].rate);
		}
	}
	if (hca && *hca && *hca != '^' && !used)
		ck_say(&f->names, "%s: NCCL_IB_HCA=%s names no RDMA device there (it has %s)", r->host, hca,
		       np ? r->rdma : "none");
	if (!nic_found && !strstr(r->ifs_here, r->env[CK_NIC]))
		ck_say(&f->names, "%s: DDP_NIC=%s names no RDMA device or interface there", r->host,
		       r->env[CK_NIC]);
	if (least > 0 && (f->least == 0 || least < f->least)) {
		f->least = least;
		snprintf(f->least_at, sizeof(f->least_at), "%s", r->host);
		snprintf(f->least_rate, sizeof(f->least_rate), "%s", least_rate);
	}
	if (least > f->most) {
		f->most = least;
		snprintf(f->most_rate, sizeof(f->most_rate), "%s", least_rate);
	}
}

static void eval_fabric(struct ck_world *w, const struct nodes *nd)
{
	static struct fabric f;
	memset(&f, 0, sizeof(f));
	f.nccl = !strcmp(w->backend, "nccl");
	for (int n = 0; n < nd->n; n++) {
		const struct ck_rank *r = &w->ranks[nd->first[n]];
		/* where NCCL leaves the RDMA devices alone */
		if ((ck_has(r, CK_NCCL_IB_DISABLE) && !strcmp(r->env[CK_NCCL_IB_DISABLE], "1")) ||
		    (ck_has(r, CK_NCCL_NET) && !strcasecmp(r->env[CK_NCCL_NET], "Socket")))
			continue;
		fabric_node(&f, r);
	}
	enum ck_level bad = f.nccl ? CK_FAIL : CK_WARN;
	const char *who = f.nccl ? "" : " (gloo runs over TCP; an NCCL step here would not)";
	if (f.names.items || f.down.items) {
		ck_add(w, "net.fabric", bad, "%s%s%s%s", f.names.items ? ck_said(&f.names) : "",
		       f.names.items && f.down.items ? "; " : "", f.down.items ? ck_said(&f.down) : "", who);
	} else if (f.least > 0 && f.most > f.least) {
		ck_add(w, "net.fabric", CK_WARN, "%s's RDMA ports run at %s where other nodes' run at %s: the "
		       "slowest link sets the speed of every collective", f.least_at, f.least_rate, f.most_rate);
	} else if (f.ports_up) {
		ck_add(w, "net.fabric", CK_OK, "%d RDMA port%s active on %d node%s, at %s", f.ports_up,
		       f.ports_up == 1 ? "" : "s", f.nodes_with, f.nodes_with == 1 ? "" : "s",
		       f.least_rate[0] ? f.least_rate : "an unknown rate");
	} else {
		ck_add(w, "net.fabric", CK_OK, "no InfiniBand or RoCE port in use: NCCL would use its socket "
		       "transport");
	}
}

void ck_eval_hw(struct ck_world *w, const struct nodes *nd)
{
	eval_pcie(w);
	eval_fabric(w, nd);
}
