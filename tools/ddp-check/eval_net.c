/* ddp-check's network checks: the interface each task chose, its kind
 * across nodes, the probe mesh between nodes, the clocks' skew. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "eval.h"

/* The nodes' MTUs (of their first task's interface): "MTU 1500", or, where
 * they differ, "MTU 9000 on node1, node2; 1500 on node3"; "" none known. */
static void mtus(const struct ck_world *w, const struct nodes *nd, char *out, size_t len)
{
	int seen[8], ns = 0;
	size_t off = 0;

	out[0] = 0;
	for (int n = 0; n < nd->n; n++) {
		int m = w->ranks[nd->first[n]].ifmtu, k = 0;
		while (k < ns && seen[k] != m)
			k++;
		if (m > 0 && k == ns && ns < 8)
			seen[ns++] = m;
	}
	if (ns == 1 || !ns) {
		if (ns)
			snprintf(out, len, "MTU %d", seen[0]);
		return;
	}
	for (int k = 0; k < ns; k++) {
		int listed = 0;
		off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%d on ",
					k ? "; " : "MTU ", seen[k]);
		for (int n = 0; n < nd->n; n++) {
			if (w->ranks[nd->first[n]].ifmtu != seen[k])
				continue;
			if (listed++ == 3) {
				off += (size_t)snprintf(out + off, off < len ? len - off : 0, ", ...");
				break;
			}
			off += (size_t)snprintf(out + off, off < len ? len - off : 0, "%s%s",
						listed > 1 ? ", " : "", nd->name[n]);
		}
	}
}

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
			ck_say(&warn, "task %d (%s): %s is not set, so the backend picks an interface itself "
			    "(the route to the head is %s)", i, r->host, r->ifvar, r->ifname[0] ? r->ifname : "unknown");
		} else if (!strcmp(st, "missing")) {
			ck_say(&fail, "task %d (%s): %s=%s: no such interface there (it has %s)", i, r->host,
			    r->ifvar, r->ifname, r->ifs_here);
		} else if (!strcmp(st, "down")) {
			ck_say(&fail, "task %d (%s): %s=%s is down", i, r->host, r->ifvar, r->ifname);
		} else if (!strcmp(st, "noaddr")) {
			ck_say(&fail, "task %d (%s): %s=%s has no address of the head's family (MASTER_ADDR=%s)",
			    i, r->host, r->ifvar, r->ifname, r->env[CK_MASTER_ADDR]);
		} else if (!strcmp(st, "loopback")) {
			if (nd->n > 1)
				ck_say(&fail, "task %d (%s): %s=%s is a loopback interface: other nodes cannot "
				    "reach it", i, r->host, r->ifvar, r->ifname);
		} else if (!strcmp(st, "virtual")) {
			if (nd->n > 1)
				ck_say(&fail, "task %d (%s): %s=%s is a container or virtual bridge (%s): other "
				    "nodes cannot reach it", i, r->host, r->ifvar, r->ifname, r->ifaddr);
		} else if (!strcmp(st, "pattern")) {
			ck_say(&warn, "task %d (%s): %s=%s excludes interfaces rather than naming one: not "
			    "checked", i, r->host, r->ifvar, r->env[CK_NCCL_IF]);
		} else {
			ck_say(&fail, "task %d (%s): interface state '%s'", i, r->host, st);
		}
	}
	if (fail.items)
		ck_add(w, "net.iface", CK_FAIL, "%s", ck_said(&fail));
	else if (warn.items)
		ck_add(w, "net.iface", CK_WARN, "%s", ck_said(&warn));
	else {
		char mtu[256];
		mtus(w, nd, mtu, sizeof(mtu));
		ck_add(w, "net.iface", CK_OK, "%s (%s%s) exists, is up and has an address of the head's "
		       "family on every task%s%s%s", first[0] ? first : "the interface", names,
		       nnames > 4 ? ", ..." : "",
		       nlocal ? " (local only, enough for a step on one node)" : "", mtu[0] ? "; " : "", mtu);
	}
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
		ck_say(&m, "%s: %s (%s)", r->host, r->ifkind, r->ifname);
	}
	ck_add(w, "net.kind", CK_WARN, "the nodes use different kinds of interface: %s; the "
	       "slowest sets the pace of every collective", ck_said(&m));
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
				ck_say(&warn, "%s was not probed: no usable interface to listen on (net.iface)",
				    nd->name[n]);
			else
				ck_say(&fail, "%s did not report its probes (its prober, task %d, is gone?)",
				    nd->name[n], f);
			continue;
		}
		const struct ck_probe *pr = &w->probes[p];
		for (size_t k = 0; k < pr->npeers; k++) {
			const struct ck_peer *q = &pr->peers[k];
			pairs++;
			int there = -1;
			for (int m = 0; m < nd->n && there < 0; m++)
				if (!strcmp(nd->name[m], q->node))
					there = nd->first[m];
			if (!q->ok && q->bulk_short && there >= 0 && w->ranks[there].proto < 2) {
				/* an older ddp-check there does not answer the request */
				ck_say(&warn, "%s greeted %s, whose older ddp-check does not send the full-size "
				    "packet asked for: that path's MTU was not checked", nd->name[n], q->node);
			} else if (!q->ok && q->bulk_short) {
				/* the interfaces' MTUs at both ends (this prober's,
				 * and the first task's of the node it asked) */
				ck_say(&fail, "%s cannot reach %s at %s: %s; MTU %d on %s (%s), %d on %s (%s)",
				    nd->name[n], q->node, q->addr, q->err, w->ranks[p].ifmtu, w->ranks[p].ifname,
				    nd->name[n], there < 0 ? 0 : w->ranks[there].ifmtu,
				    there < 0 ? "?" : w->ranks[there].ifname, q->node);
			} else if (!q->ok) {
				ck_say(&fail, "%s cannot reach %s at %s: %s", nd->name[n], q->node, q->addr, q->err);
			} else if (q->rtt_us > worst) {
				worst = q->rtt_us;
				snprintf(worst_s, sizeof(worst_s), "%s to %s", nd->name[n], q->node);
			}
		}
	}
	if (fail.items)
		ck_add(w, "net.probe", CK_FAIL, "%s%s%s", ck_said(&fail), warn.items ? "; " : "",
		       warn.items ? ck_said(&warn) : "");
	else if (warn.items)
		ck_add(w, "net.probe", CK_WARN, "%s", ck_said(&warn));
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

/* Below this the RDMA stack's own users give up (UCX's default threshold);
 * NVIDIA asks for unlimited. */
#define MEMLOCK_MIN (512LL << 20)

static void bytes(long long b, char *out, size_t len)
{
	if (b < 0)
		snprintf(out, len, "unlimited");
	else if (b >= 1LL << 30 && b % (1LL << 30) == 0)
		snprintf(out, len, "%lld GiB", b >> 30);
	else if (b >= 1LL << 20 && b % (1LL << 20) == 0)
		snprintf(out, len, "%lld MiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(out, len, "%lld KiB", b >> 10);
	else
		snprintf(out, len, "%lld bytes", b);
}

/* Whether NCCL in task r would use its node's RDMA devices. */
static int nccl_uses_rdma(const struct ck_rank *r, char *why, size_t len)
{
	if (!r->rdma[0])
		return 0;
	if (ck_has(r, CK_NCCL_IB_DISABLE) && strcmp(r->env[CK_NCCL_IB_DISABLE], "0") != 0) {
		snprintf(why, len, "NCCL_IB_DISABLE=%.32s", r->env[CK_NCCL_IB_DISABLE]);
		return 0;
	}
	if (ck_has(r, CK_NCCL_NET) && r->env[CK_NCCL_NET][0] && strcasecmp(r->env[CK_NCCL_NET], "IB") != 0) {
		snprintf(why, len, "NCCL_NET=%.32s", r->env[CK_NCCL_NET]);
		return 0;
	}
	return 1;
}

/* NCCL registers its buffers with the RDMA devices (ibv_reg_mr), which
 * pins them: each task's locked-memory limit must allow it.  Slurm gives
 * tasks the soft limits of the shell srun ran in (PropagateResourceLimits)
 * or slurmd's own, often 64 KiB or 8 MiB. */
static void eval_memlock(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 };
	char devs[128] = "", off_why[64] = "", least[32] = "";
	int used = 0, off = 0;
	long long low = -1;

	if (strcmp(w->backend, "nccl") != 0) {
		ck_add(w, "net.memlock", CK_OK, "%s registers no memory with RDMA devices: the "
		       "locked-memory limit does not matter", w->backend);
		return;
	}
	for (int n = 0; n < nd->n; n++) {
		long long worst = -2;
		int ntasks = 0, first = -1;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			char why[64] = "";
			if (nd->of[i] != n || r->proto < 2)
				continue;
			if (!nccl_uses_rdma(r, why, sizeof(why))) {
				if (why[0] && !off++)
					snprintf(off_why, sizeof(off_why), "%s", why);
				continue;
			}
			used++;
			if (!devs[0])
				snprintf(devs, sizeof(devs), "%s", r->rdma);
			if (r->memlock >= 0 && (low < 0 || r->memlock < low))
				low = r->memlock;
			if (r->memlock < 0 || r->memlock >= MEMLOCK_MIN)
				continue;
			if (first < 0)
				first = i;
			ntasks++;
			if (worst == -2 || r->memlock < worst)
				worst = r->memlock;
		}
		if (first >= 0) {
			char b[32];
			bytes(worst, b, sizeof(b));
			ck_say(&fail, "%s: locked memory limited to %s (ulimit -l; task %d%s) beside RDMA "
			    "devices %s", nd->name[n], b, first, ntasks > 1 ? " and others" : "",
			    w->ranks[first].rdma);
		}
	}
	if (fail.items) {
		ck_add(w, "net.memlock", CK_FAIL, "%s: NCCL registers its buffers with them (ibv_reg_mr), "
		       "which pins memory, and fails where the limit is too small (64 KiB and 8 MiB "
		       "are; UCX wants 512 MiB, NVIDIA asks for unlimited).  Slurm gives tasks the "
		       "limit of the shell srun ran in, or slurmd's own: PropagateResourceLimitsExcept="
		       "MEMLOCK in slurm.conf, LimitMEMLOCK=infinity in slurmd's systemd unit", ck_said(&fail));
		return;
	}
	if (!used) {
		if (off)
			ck_add(w, "net.memlock", CK_OK, "%s: NCCL leaves the RDMA devices alone, so the "
			       "locked-memory limit does not matter", off_why);
		else
			ck_add(w, "net.memlock", CK_OK, "no RDMA device (InfiniBand, RoCE) on any node: "
			       "NCCL talks over sockets, and the locked-memory limit does not matter");
		return;
	}
	bytes(low, least, sizeof(least));
	ck_add(w, "net.memlock", CK_OK, "locked memory %s%s on the %d task%s beside RDMA devices (%s)",
	       low < 0 ? "" : "at least ", least, used, used == 1 ? "" : "s", devs);
}

/* gloo connects every rank to every other (a full mesh: N-1 sockets a
 * rank) beside the program's own files: each task's open-files limit
 * must hold them, and room for its data (Slurm hands tasks the soft limit
 * of the shell srun ran in, often 1024).  NCCL connects a rank to a few
 * peers (its rings and trees), whatever the world size. */
#define NOFILE_BASE 16    /* stdio, the store, libraries: gloo's mesh alone */
#define NOFILE_ROOM 256   /* and a training program's files beside it */

static void eval_nofile(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, warn = { 0 };
	long long mesh = w->n - 1, low = -1;

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		if (r->joined && r->proto >= 2 && r->nofile >= 0 && (low < 0 || r->nofile < low))
			low = r->nofile;
	}
	if (strcmp(w->backend, "gloo") != 0) {
		char b[48] = "";
		if (low >= 0)
			snprintf(b, sizeof(b), "; the least open-files limit %lld", low);
		ck_add(w, "net.nofile", CK_OK, "%s connects each rank to a few peers (its rings and trees), "
		       "not to all%s", w->backend, b);
		return;
	}
	for (int n = 0; n < nd->n; n++) {
		long long worst = -1;
		int first = -1, more = 0;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n || r->proto < 2 || r->nofile < 0 || r->nofile >= mesh + NOFILE_ROOM)
				continue;
			if (first < 0)
				first = i;
			else
				more = 1;
			if (worst < 0 || r->nofile < worst)
				worst = r->nofile;
		}
		if (first < 0)
			continue;
		ck_say(worst < mesh + NOFILE_BASE ? &fail : &warn, "%s: %lld (task %d%s)",
		    nd->name[n], worst, first, more ? " and others" : "");
	}
	if (fail.items || warn.items) {
		struct msg *m = fail.items ? &fail : &warn;
		ck_add(w, "net.nofile", fail.items ? CK_FAIL : CK_WARN, "the open-files limit (ulimit -n) on %s: gloo "
		       "connects every rank to every other, %lld socket%s a rank at world size %d, %s (at "
		       "least %lld wanted); Slurm gives tasks the limit of the shell srun ran in: raise it "
		       "there (ulimit -n), or PropagateResourceLimitsExcept=NOFILE in slurm.conf with "
		       "LimitNOFILE in slurmd's systemd unit", ck_said(m), mesh, mesh == 1 ? "" : "s", w->n,
		       fail.items ? "which leave no room for the mesh itself" :
				    "which leave little room for the program's own files",
		       mesh + NOFILE_ROOM);
		return;
	}
	if (low < 0)
		ck_add(w, "net.nofile", CK_OK, "open files unlimited on every task: room for gloo's "
		       "%lld socket%s a rank", mesh, mesh == 1 ? "" : "s");
	else
		ck_add(w, "net.nofile", CK_OK, "open files at least %lld on every task: room for gloo's "
		       "%lld socket%s a rank and the program's own files", low, mesh, mesh == 1 ? "" : "s");
}

/* A size as people read it: "23.5 GiB", "512 MiB", "64 KiB". */
static void human(long long b, char *out, size_t len)
{
	if (b >= 1LL << 30)
		snprintf(out, len, "%.1f GiB", (double)b / (1LL << 30));
	else if (b >= 1LL << 20)
		snprintf(out, len, "%lld MiB", b >> 20);
	else
		snprintf(out, len, "%lld KiB", b >> 10);
}

/* NCCL's troubleshooting guide asks containers for 1 GiB of /dev/shm
 * (--shm-size=1g): the segments between a node's ranks (about 9 MiB each a
 * channel and peer) and its proxy's state live there. */
#define SHM_MIN (1LL << 30)
/* systemd's SYSTEM_UID_MAX: RemoveIPC spares the users up to it. */
#define SYSTEM_UID_MAX 999

/* NCCL makes shared-memory segments at start-up and a rank that cannot
 * fails ("Error while creating shared memory segment"); logind's RemoveIPC
 * deletes a user's segments when their last login session on the node
 * ends, under a running job ("unlink shared memory ... failed"). */
static void eval_shm(struct ck_world *w, const struct nodes *nd)
{
	struct msg fail = { 0 }, low = { 0 };
	char least_s[32] = "", unknown[200] = "", spared[96] = "", ipc[160] = "";
	long long least = -1;
	int measured = 0, nipc = 0;
	size_t ioff = 0;
	long ipc_uid = -1;

	if (strcmp(w->backend, "nccl") != 0) {
		ck_add(w, "net.shm", CK_OK, "%s keeps nothing in shared memory (/dev/shm)", w->backend);
		return;
	}
	for (int n = 0; n < nd->n; n++) {
		int bad = -1, worst = -1, removes = -1, nbad = 0;
		for (int i = 0; i < w->n; i++) {
			const struct ck_rank *r = &w->ranks[i];
			if (nd->of[i] != n || r->proto < 3 || !r->shm_path[0])
				continue;
			measured++;
			if (r->shm_err[0]) {
				nbad++;
				if (bad < 0)
					bad = i;
			} else if (r->shm_size > 0) {
				if (least < 0 || r->shm_free < least)
					least = r->shm_free;
				if (worst < 0 || r->shm_free < w->ranks[worst].shm_free)
					worst = i;
			}
			if (r->removeipc == 1 && r->uid > SYSTEM_UID_MAX && removes < 0)
				removes = i;
			else if (r->removeipc == 1 && !spared[0])
				snprintf(spared, sizeof(spared), "RemoveIPC=yes spares the tasks' user (uid %ld, a "
					 "system user)", r->uid);
			else if (r->removeipc < 0 && !unknown[0])
				snprintf(unknown, sizeof(unknown), "logind's RemoveIPC not known (%s: %.150s)",
					 nd->name[n], r->removeipc_err);
		}
		if (bad >= 0) {
			ck_say(&fail, "%s: %s (task %d%s)", nd->name[n], w->ranks[bad].shm_err, bad,
			    nbad > 1 ? " and others" : "");
		} else if (worst >= 0 && w->ranks[worst].shm_free < SHM_MIN) {
			const struct ck_rank *r = &w->ranks[worst];
			char f[32], sz[32], seg[96] = "";
			human(r->shm_free, f, sizeof(f));
			human(r->shm_size, sz, sizeof(sz));
			if (r->shm_nccl) {
				char b[32];
				human(r->shm_nccl_bytes, b, sizeof(b));
				snprintf(seg, sizeof(seg), ", %d NCCL segment%s there (%s: running jobs', or a "
					 "crashed one's)", r->shm_nccl, r->shm_nccl == 1 ? "" : "s", b);
			}
			ck_say(&low, "%s: %s free of %s in %s (task %d)%s", nd->name[n], f, sz, r->shm_path,
			    worst, seg);
		}
		if (removes >= 0) {
			if (ipc_uid < 0)
				ipc_uid = w->ranks[removes].uid;
			/* the first four nodes by name */
			if (nipc++ < 4)
				ioff += (size_t)snprintf(ipc + ioff, ioff < sizeof(ipc) ? sizeof(ipc) - ioff : 0,
							 "%s%s", ioff ? ", " : "", nd->name[n]);
		}
	}
	if (!measured) {
		ck_add(w, "net.shm", CK_SKIP, "no task reported its shared memory (an older ddp-check?)");
		return;
	}
	if (fail.items) {
		ck_add(w, "net.shm", CK_FAIL, "%s: NCCL makes its shared-memory segments there at start-up "
		       "and fails without them (Error while creating shared memory segment); a container "
		       "needs a writable /dev/shm of 1 GiB or more (docker --shm-size=1g; Kubernetes: an "
		       "emptyDir of medium Memory)", ck_said(&fail));
		return;
	}
	if (low.items || nipc) {
		char a[CK_MSG] = "", b[CK_MSG] = "";
		if (low.items)
			snprintf(a, sizeof(a), "%s: NCCL's ranks on a node fail to start when their segments do "
				 "not fit (failed to extend /dev/shm/nccl-...); NCCL asks containers for 1 GiB "
				 "(--shm-size=1g)", ck_said(&low));
		if (nipc)
			snprintf(b, sizeof(b), "logind's RemoveIPC=yes on %s%s removes the shared memory of a "
				 "user (uid %ld here) when their last login session on the node ends: an ssh to a "
				 "job's node and out again deletes NCCL's segments under the running job (unlink "
				 "shared memory failed); RemoveIPC=no in /etc/systemd/logind.conf", ipc,
				 nipc > 4 ? " and others" : "", ipc_uid);
		ck_add(w, "net.shm", CK_WARN, "%s%s%s", a, a[0] && b[0] ? "; " : "", b);
		return;
	}
	if (least >= 0)
		human(least, least_s, sizeof(least_s));
	ck_add(w, "net.shm", CK_OK, "a 4 MiB segment made in shared memory on every task, %s%s%s; %s",
	       least >= 0 ? "at least " : "", least >= 0 ? least_s : "no size limit",
	       least >= 0 ? " free" : "", unknown[0] ? unknown : spared[0] ? spared :
	       "logind keeps users' shared memory (RemoveIPC=no)");
}

void ck_eval_net(struct ck_world *w, const struct nodes *nd)
{
	eval_iface(w, nd);
	eval_kind(w, nd);
	eval_probe(w, nd);
	eval_memlock(w, nd);
	eval_nofile(w, nd);
	eval_shm(w, nd);
	eval_clock(w, nd);
}
