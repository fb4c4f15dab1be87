/* ddp-check's records and verdicts on crafted steps: every check must name
 * the task, node and value at fault, and stay quiet on a healthy step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "eval.h"
#include "gpu_health.h"
#include "probe.h"
#include "test.h"

/* A healthy step: nodes x per tasks, gloo, one interface per node. */
static struct ck_world *world(int nodes, int per)
{
	struct ck_world *w = calloc(1, sizeof(*w));
	int n = nodes * per;

	w->backend = "gloo";
	w->n = n;
	w->ranks = calloc((size_t)n, sizeof(*w->ranks));
	w->probes = calloc((size_t)n, sizeof(*w->probes));
	w->colls = calloc((size_t)n, sizeof(*w->colls));
	w->opts = (struct ck_opts){ .min_bytes = 8, .max_bytes = 1024, .step_factor = 2, .iters = 5,
				    .warmup = 1, .max_skew_ms = 100, .probe_ms = 2000, .timeout_s = 60,
				    .min_kill_wait = 10, .h2d_bytes = 64u << 20, .min_h2d = 50,
				    .p2p_bytes = 64u << 20, .min_p2p = 50 };
	w->slurm = (struct ck_slurm){ .have = 1, .kill_wait = 30 };
	for (int i = 0; i < n; i++) {
		w->ranks[i].proto = CK_RECORD_PROTO;
		snprintf(w->ranks[i].version, sizeof(w->ranks[i].version), "%s", DDPENV_VERSION);
		struct ck_rank *r = &w->ranks[i];
		int node = i / per, lr = i % per;
		r->id = i;
		r->joined = 1;
		snprintf(r->host, sizeof(r->host), "gpu%02d", node + 1);
		r->pid = 1000 + i;
		const char *v[CK_NENV] = { 0 };
		char rank[16], local[16], ws[16], lws[16], nr[16], ifn[16];
		snprintf(rank, sizeof(rank), "%d", i);
		snprintf(local, sizeof(local), "%d", lr);
		snprintf(ws, sizeof(ws), "%d", n);
		snprintf(lws, sizeof(lws), "%d", per);
		snprintf(nr, sizeof(nr), "%d", node);
		snprintf(ifn, sizeof(ifn), "ens%d", 17);
		v[CK_MASTER_ADDR] = "10.0.0.1";
		v[CK_MASTER_PORT] = "29512";
		v[CK_RANK] = rank;
		v[CK_LOCAL_RANK] = local;
		v[CK_WORLD_SIZE] = ws;
		v[CK_LOCAL_WORLD_SIZE] = lws;
		v[CK_NODE_RANK] = nr;
		v[CK_GLOO_IF] = ifn;
		for (int k = 0; k < CK_NENV; k++)
			if (v[k]) {
				snprintf(r->env[k], sizeof(r->env[k]), "%s", v[k]);
				r->have |= 1u << k;
			}
		snprintf(r->ifvar, sizeof(r->ifvar), "GLOO_SOCKET_IFNAME");
		snprintf(r->ifname, sizeof(r->ifname), "ens17");
		snprintf(r->ifstate, sizeof(r->ifstate), "up");
		snprintf(r->ifaddr, sizeof(r->ifaddr), "10.0.0.%d", node + 1);
		snprintf(r->ifkind, sizeof(r->ifkind), "ethernet");
		r->nofile = 1024;   /* Debian's soft limit */
		/* Debian's process limit on a 16 GiB node (threads-max / 2), a
		 * user's login shell and the step's tasks running there */
		r->nproc = 63711;
		r->user_threads = 40;
		r->memlock = 8LL << 20;
		/* a bare-metal node's /dev/shm (half of 64 GiB), logind's
		 * RemoveIPC=no (Debian's slurmd nodes set it), a user's task */
		snprintf(r->shm_path, sizeof(r->shm_path), "/dev/shm");
		r->shm_size = 32LL << 30;
		r->shm_free = (30LL << 30) + (node << 28);
		r->removeipc = 0;
		r->uid = 1000;
		r->head_local = node == 0;
		/* per tasks on 2*per CPUs: task lr gets CPUs 2lr, 2lr+1 */
		snprintf(r->cpus, sizeof(r->cpus), "%d-%d", 2 * lr, 2 * lr + 1);
		snprintf(r->allowed, sizeof(r->allowed), "0-%d", 2 * per - 1);
		snprintf(r->numa, sizeof(r->numa), "0");
		r->gpu_numa = -1;
		r->visible = -1;
		snprintf(r->probe, sizeof(r->probe), "10.0.0.%d:4000", node + 1);
		if (lr == 0) {
			struct ck_probe *p = &w->probes[i];
			p->have = 1;
			p->npeers = (size_t)nodes - 1;
			p->peers = calloc((size_t)nodes, sizeof(*p->peers));
			for (int k = 0, m = 0; k < nodes; k++) {
				if (k == node)
					continue;
				snprintf(p->peers[m].node, sizeof(p->peers[m].node), "gpu%02d", k + 1);
				snprintf(p->peers[m].addr, sizeof(p->peers[m].addr), "10.0.0.%d:4000", k + 1);
				p->peers[m].ok = 1;
				p->peers[m].rtt_us = 50 + k;
				m++;
			}
			if (node > 0) {
				p->have_clock = 1;
				p->clock_off_us = 30 * node;
				p->clock_unc_us = 10;
			}
		}
	}
	w->nsizes = ck_sizes(&w->opts, w->sizes, CK_MAX_SIZES);
	return w;
}

static void with_gpus(struct ck_world *w, int per)
{
	static const char *const bus[] = { "0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0" };
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		int lr = i % per;
		snprintf(r->gpu, sizeof(r->gpu), "%s", bus[lr % 4]);
		/* each GPU has the two CPUs its task got */
		snprintf(r->gpu_near, sizeof(r->gpu_near), "%d-%d", 2 * lr, 2 * lr + 1);
		r->gpu_numa = 0;
		r->step_gpus = per;
		r->visible = per;
		snprintf(r->env[CK_CVD], sizeof(r->env[CK_CVD]), "0,1,2,3");
		r->have |= 1u << CK_CVD;
	}
}

static void ran(struct ck_world *w, double t_last)
{
	w->coll_ran = 1;
	for (int i = 0; i < w->n; i++) {
		struct ck_coll *c = &w->colls[i];
		c->have = 1;
		c->ok = 1;
		snprintf(c->msg, sizeof(c->msg), "1 and 4096 floats, sums of rank+1");
		c->first_s = 1.0 + i * 0.01;
		c->init_s = 0.2;
		c->ntimes = w->nsizes;
		for (size_t k = 0; k < w->nsizes; k++)
			c->times[k] = k + 1 == w->nsizes ? t_last : 1e-5;
	}
}

static void drop(struct ck_world *w)
{
	for (int i = 0; i < w->n; i++)
		ck_probe_free(&w->probes[i]);
	free(w->ranks);
	free(w->probes);
	free(w->colls);
	free(w->res);
	free(w);
}

static const struct ck_result *res(const struct ck_world *w, const char *name)
{
	for (size_t i = 0; i < w->nres; i++)
		if (!strcmp(w->res[i].name, name))
			return &w->res[i];
	return NULL;
}

static const char *const LV[] = { "OK", "WARN", "FAIL", "SKIP" };

#define test_check(desc, w, name, lv, frag) do {                                     \
	const struct ck_result *r_ = res(w, name);                                   \
	int ok_ = r_ && r_->level == (lv) && strstr(r_->msg, frag);                  \
	test_cond(desc, ok_);                                                        \
	if (!ok_)                                                                    \
		printf("#   %s: got %s '%s', want %s with '%s'\n", name,            \
		       r_ ? LV[r_->level] : "nothing", r_ ? r_->msg : "", LV[lv], frag); \
} while (0)

static int count_level(const struct ck_world *w, enum ck_level lv)
{
	int n = 0;
	for (size_t i = 0; i < w->nres; i++)
		n += w->res[i].level == lv;
	return n;
}

static void test_records(void)
{
	struct ck_world *w = world(2, 2);
	struct ck_rank *r = &w->ranks[3], back;
	char buf[16384];

	snprintf(r->head_err, sizeof(r->head_err), "line one\nline two");
	r->ifmtu = 9000;
	snprintf(r->mig, sizeof(r->mig), "MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d");
	int n = ck_rank_encode(r, buf, sizeof(buf));
	test_cond("a rank record encodes", n > 0);
	test_cond("the rank record decodes", ck_rank_decode(&back, buf, (size_t)n) == 0);
	test_cond("id, pid and host survive", back.id == 3 && back.pid == 1003 && !strcmp(back.host, "gpu02"));
	test_cond("set variables survive, unset ones stay unset",
		  back.have == r->have && !strcmp(back.env[CK_WORLD_SIZE], "4") && !(back.have & (1u << CK_CVD)));
	test_streq("cpus survive", back.cpus, "2-3");
	test_streq("a MIG device survives", back.mig, "MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d");
	test_streq("a newline in a value becomes a space", back.head_err, "line one line two");
	test_cond("the interface's MTU survives", back.ifmtu == 9000);
	test_cond("shared memory and RemoveIPC survive", !strcmp(back.shm_path, "/dev/shm") &&
		  back.shm_size == 32LL << 30 && back.shm_free == r->shm_free && back.removeipc == 0 &&
		  back.uid == 1000);
	test_cond("the record's format and version survive",
		  back.proto == CK_RECORD_PROTO && !strcmp(back.version, DDPENV_VERSION));
	test_cond("a record without a format is an older ddp-check's (0)",
		  ck_rank_decode(&back, "id=1\nhost=h\n", 12) == 0 && back.proto == 0);
	test_cond("... whose RemoveIPC and shared memory are unknown, not 'no' and 0",
		  back.removeipc == -1 && back.shm_size == -1 && !back.shm_path[0]);
	test_cond("a short buffer is an error, not a truncated record", ck_rank_encode(r, buf, 64) < 0);
	test_cond("a record without id or host is refused", ck_rank_decode(&back, "pid=3\n", 6) < 0);

	struct ck_probe p = { 0 }, pb;
	p.have = 1;
	p.npeers = 1;
	p.peers = calloc(1, sizeof(*p.peers));
	snprintf(p.peers[0].node, sizeof(p.peers[0].node), "gpu02");
	snprintf(p.peers[0].addr, sizeof(p.peers[0].addr), "[fd00::2]:4000");
	snprintf(p.peers[0].err, sizeof(p.peers[0].err), "no answer within 2000 ms");
	p.peers[0].bulk_short = 1;
	p.have_clock = 1;
	p.clock_off_us = -1234.5;
	p.clock_unc_us = 20;
	n = ck_probe_encode(&p, buf, sizeof(buf));
	ck_probe_decode(&pb, buf, (size_t)n);
	test_cond("a probe record round-trips", pb.have && pb.npeers == 1 && !pb.peers[0].ok &&
		  !strcmp(pb.peers[0].addr, "[fd00::2]:4000") && !strcmp(pb.peers[0].err, "no answer within 2000 ms") &&
		  pb.peers[0].bulk_short == 1 && pb.have_clock && pb.clock_off_us == -1234.5);
	ck_probe_free(&p);
	ck_probe_free(&pb);

	struct ck_coll c = { .ok = 1, .first_s = 2.5, .ntimes = 3, .times = { 1e-6, 2.5e-5, 0.125 } }, cb;
	n = ck_coll_encode(&c, buf, sizeof(buf));
	ck_coll_decode(&cb, buf, (size_t)n);
	test_cond("a collective record round-trips", cb.have && cb.ok && cb.first_s == 2.5 && cb.ntimes == 3 &&
		  cb.times[0] == 1e-6 && cb.times[2] == 0.125);
	drop(w);
}

static void test_sizes(void)
{
	struct ck_opts o = { .min_bytes = 8, .max_bytes = 256u << 20, .step_factor = 2 };
	size_t s[CK_MAX_SIZES], n = ck_sizes(&o, s, CK_MAX_SIZES);
	test_cond("8 B to 256 MB by 2: 26 sizes", n == 26 && s[0] == 8 && s[25] == 256u << 20);
	o.max_bytes = 0;
	test_cond("-e 0: no sweep", ck_sizes(&o, s, CK_MAX_SIZES) == 0);
	o = (struct ck_opts){ .min_bytes = 1, .max_bytes = 100, .step_factor = 10 };
	n = ck_sizes(&o, s, CK_MAX_SIZES);
	test_cond("sizes are whole floats and stop at the maximum", n == 2 && s[0] == 4 && s[1] == 40);
	test_cond("busbw at one rank is 0 (nccl-tests)", ck_busbw(10, 1) == 0);
	test_cond("busbw = algbw * 2(n-1)/n", ck_busbw(8, 8) == 14);
}

static void test_healthy(void)
{
	struct ck_world *w = world(3, 2);
	char why[256];

	ck_eval_setup(w);
	test_cond("a healthy step: 31 setup checks, all OK", w->nres == 31 && count_level(w, CK_OK) == 31);
	for (size_t i = 0; i < w->nres; i++)
		if (w->res[i].level != CK_OK)
			printf("#   %s %s: %s\n", LV[w->res[i].level], w->res[i].name, w->res[i].msg);
	test_check("net.probe counts the connections", w, "net.probe", CK_OK, "6 connections");
	test_check("clock.skew names the worst node", w, "clock.skew", CK_OK, "0.060 ms (gpu03");
	test_check("net.iface names the interface", w, "net.iface", CK_OK, "GLOO_SOCKET_IFNAME (ens17)");
	test_check("net.memlock: gloo pins nothing", w, "net.memlock", CK_OK,
		   "gloo registers no memory with RDMA devices: the locked-memory limit does not matter");
	test_cond("collectives may run", ck_coll_safe(w, why, sizeof(why)));
	ran(w, 1e-3);
	ck_eval_coll(w);
	test_check("the all-reduce is exact", w, "coll.allreduce", CK_OK, "exact on all 6 tasks");
	/* 1024 B in 1 ms: algbw 1.024e-3 GB/s, busbw * 10/6 */
	test_check("busbw of the largest size", w, "coll.busbw", CK_OK, "busbw 0.00 GB/s at 1024 bytes");
	test_check("the slowest task's time to the first collective", w, "time.first_collective", CK_OK,
		   "1.050 s from task start to the first completed all-reduce (slowest: task 5 on gpu03");
	test_cond("exit code 0", ck_exit_code(w) == 0);

	FILE *f = tmpfile();
	ck_report_text(w, f);
	rewind(f);
	char text[16384];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	test_err("the header", text, "# ddp-check " DDPENV_VERSION ": backend gloo, world size 6 on 3 nodes, head gpu01 (MASTER_ADDR=10.0.0.1 MASTER_PORT=29512)");
	test_err("a placement line", text, "\n      5  gpu03      1005  ens17  10.0.0.3  -    2-3   0\n");
	test_err("a bandwidth row", text, "\n          1024           256   float    sum     1000.00      0.00      0.00\n");
	test_err("the count line", text, "\nddp-check: 34 checks OK, 0 WARN, 0 FAILED\n");

	f = tmpfile();
	snprintf(w->res[0].msg, sizeof(w->res[0].msg), "a \"quoted\"\\ message\t");
	ck_report_json(w, f);
	rewind(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	test_err("JSON escapes quotes, backslashes and controls", text, "\"a \\\"quoted\\\"\\\\ message\\u0009\"");
	test_err("JSON summary", text, "\"summary\": {\"ok\": 34, \"warn\": 0, \"fail\": 0, \"skip\": 0},\n  \"exit_code\": 0");
	test_err("JSON bandwidth", text, "{\"size\": 1024, \"count\": 256, \"type\": \"float\", \"redop\": \"sum\", \"time_us\": 1000.000");
	test_err("JSON nodes", text, "\"nodes\": 3,\n  \"nodes_reported\": 3,\n");
	test_err("JSON limits, shared memory and RemoveIPC", text, "\"nofile\": 1024, \"nproc\": 63711, \"user_threads\": 40, \"shm\": {\"path\": \"/dev/shm\", "
		 "\"size\": 34359738368, \"free\": 32212254720, \"nccl_segments\": 0, \"error\": \"\", "
		 "\"removeipc\": false, \"uid\": 1000}");

	/* task 0 alone reports (it could not host the rendezvous): the step's
	 * nodes from Slurm, and how many reported */
	w->step_nodes = 3;
	for (int i = 1; i < w->n; i++)
		w->ranks[i].joined = 0;
	f = tmpfile();
	ck_report_text(w, f);
	rewind(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	test_err("a header where only task 0 reported", text,
		 "world size 6 on 3 nodes (1 reported), head gpu01");
	drop(w);
}

static void test_contract_faults(void)
{
	struct ck_world *w = world(3, 2);
	char why[256];

	snprintf(w->ranks[4].env[CK_WORLD_SIZE], DDPENV_VALLEN, "5");
	snprintf(w->ranks[2].env[CK_RANK], DDPENV_VALLEN, "1");
	snprintf(w->ranks[3].env[CK_MASTER_PORT], DDPENV_VALLEN, "29513");
	w->ranks[5].have &= ~(1u << CK_NODE_RANK);
	snprintf(w->ranks[1].env[CK_LOCAL_RANK], DDPENV_VALLEN, "0");
	snprintf(w->ranks[3].env[CK_NODE_RANK], DDPENV_VALLEN, "0");
	ck_eval_setup(w);
	test_check("a different WORLD_SIZE is named with its task", w, "env.world_size", CK_FAIL,
		   "WORLD_SIZE=5 on task 4 (gpu03); WORLD_SIZE=6 on task 0 (gpu01), task 1 (gpu01) and 3 more");
	test_check("a duplicate RANK names both tasks", w, "env.rank", CK_FAIL,
		   "RANK=1 on both task 1 (gpu01) and task 2 (gpu02)");
	test_check("a different MASTER_PORT", w, "env.master", CK_FAIL, "MASTER_PORT=29513 on task 3 (gpu02)");
	test_check("a missing variable", w, "env.present", CK_FAIL, "task 5 (gpu03) lacks NODE_RANK");
	test_check("a duplicate LOCAL_RANK", w, "env.local_rank", CK_FAIL, "LOCAL_RANK=0 twice on gpu01");
	test_check("NODE_RANK disagreeing within a node", w, "env.node_rank", CK_FAIL,
		   "tasks on gpu02 disagree: NODE_RANK=1 and 0 (task 3)");
	test_cond("contract faults do not stop the collectives", ck_coll_safe(w, why, sizeof(why)));
	test_cond("exit code 1", ck_exit_code(w) == 1);
	drop(w);

	w = world(3, 1);
	snprintf(w->ranks[2].env[CK_WORLD_SIZE], DDPENV_VALLEN, "2");
	snprintf(w->ranks[1].env[CK_WORLD_SIZE], DDPENV_VALLEN, "2");
	snprintf(w->ranks[0].env[CK_WORLD_SIZE], DDPENV_VALLEN, "2");
	ck_eval_setup(w);
	test_check("the same WORLD_SIZE everywhere, but not the task count", w, "env.world_size", CK_FAIL,
		   "WORLD_SIZE=2 on every task, but the step has 3 tasks");
	drop(w);

	w = world(2, 1);
	for (int i = 0; i < 2; i++)
		snprintf(w->ranks[i].env[CK_MASTER_ADDR], DDPENV_VALLEN, "127.0.1.1");
	ck_eval_setup(w);
	test_check("a loopback MASTER_ADDR across nodes", w, "env.head", CK_FAIL,
		   "MASTER_ADDR=127.0.1.1 is a loopback address: the other 1 node cannot reach RANK 0 on gpu01");
	drop(w);

	w = world(2, 1);
	w->ranks[0].head_local = 0;
	ck_eval_setup(w);
	test_check("MASTER_ADDR not on RANK 0's node", w, "env.head", CK_FAIL,
		   "MASTER_ADDR=10.0.0.1 is not an address of gpu01, which runs RANK 0");
	drop(w);

	w = world(3, 2);
	w->ranks[3].joined = 0;
	w->ranks[5].joined = 0;
	snprintf(w->refused, sizeof(w->refused), "refused a client at 10.0.0.9:4000 (it said rank 3 of 6): wrong rendezvous token");
	ck_eval_setup(w);
	test_check("tasks that never joined are named", w, "rdzv.join", CK_FAIL,
		   "tasks 3; 5 (of 6) never joined the rendezvous at 10.0.0.1:29512 within 60 s");
	test_check("and the store's refusals are quoted", w, "rdzv.join", CK_FAIL, "wrong rendezvous token");
	test_check("ranges are not judged on a partial step", w, "env.node_rank", CK_OK, "distinct");
	test_cond("a missing task stops the collectives", !ck_coll_safe(w, why, sizeof(why)) &&
		  strstr(why, "rdzv.join failed"));
	w->coll_ran = 0;
	snprintf(w->coll_skip, sizeof(w->coll_skip), "%s", why);
	ck_eval_coll(w);
	test_check("skipped collectives say why", w, "coll.allreduce", CK_SKIP, "not run: rdzv.join failed");
	drop(w);

	/* tasks that connected to the store, then closed it before their
	 * record (task 0 stopped waiting for them): apart from those that
	 * never joined, died and stopped on their own error apart too */
	unsigned char gone[6] = { 0 };
	w = world(3, 2);
	w->gone = gone;
	w->ranks[2].joined = w->ranks[3].joined = w->ranks[4].joined = 0;
	gone[3] = CK_GONE_DIED;
	gone[4] = CK_GONE_LEFT;
	ck_eval_setup(w);
	test_check("a task that never joined, one that died and one that stopped, each said", w, "rdzv.join", CK_FAIL,
		   "task 2 (of 6) never joined the rendezvous at 10.0.0.1:29512 within 60 s; each prints its own "
		   "reason on its stderr (a different MASTER_ADDR or MASTER_PORT, no route to the head, a wrong "
		   "DDP_RDZV_TOKEN); task 3 (of 6) connected to the rendezvous at 10.0.0.1:29512, then died before "
		   "it sent its record (killed, or crashed); task 4 (of 6) connected to the rendezvous at "
		   "10.0.0.1:29512, then stopped on an error of its own before it sent its record (its stderr says "
		   "which)");
	drop(w);
	memset(gone, 0, sizeof(gone));
	w = world(3, 1);
	w->gone = gone;
	w->ranks[1].joined = w->ranks[2].joined = 0;
	gone[1] = gone[2] = CK_GONE_DIED;
	ck_eval_setup(w);
	test_check("tasks that all died before their record: no timeout said", w, "rdzv.join", CK_FAIL,
		   "tasks 1; 2 (of 3) connected to the rendezvous at 10.0.0.1:29512, then died before they sent "
		   "their record (killed, or crashed)");
	test_cond("and no 'never joined'", !strstr(res(w, "rdzv.join")->msg, "never joined"));
	drop(w);

	/* an IPv6 head: the address in brackets, apart from the port */
	w = world(2, 1);
	for (int i = 0; i < w->n; i++)
		snprintf(w->ranks[i].env[CK_MASTER_ADDR], DDPENV_VALLEN, "fd00:ddb:231::11");
	ck_eval_setup(w);
	test_check("an IPv6 rendezvous is written [address]:port", w, "rdzv.join", CK_OK,
		   "all 2 tasks joined the rendezvous at [fd00:ddb:231::11]:29512");
	drop(w);
}

static void test_network_faults(void)
{
	struct ck_world *w = world(3, 1);
	char why[256];

	snprintf(w->ranks[1].ifstate, sizeof(w->ranks[1].ifstate), "missing");
	snprintf(w->ranks[1].ifname, sizeof(w->ranks[1].ifname), "ib0");
	snprintf(w->ranks[1].ifs_here, sizeof(w->ranks[1].ifs_here), "lo, ens17");
	snprintf(w->ranks[2].ifkind, sizeof(w->ranks[2].ifkind), "infiniband");
	w->ranks[1].probe[0] = 0;
	w->probes[1].have = 0;
	w->probes[2].peers[0].ok = 0;
	snprintf(w->probes[2].peers[0].err, sizeof(w->probes[2].peers[0].err), "no answer within 2000 ms");
	w->probes[2].clock_off_us = -250000;
	ck_eval_setup(w);
	test_check("a missing interface names the node and what it has", w, "net.iface", CK_FAIL,
		   "task 1 (gpu02): GLOO_SOCKET_IFNAME=ib0: no such interface there (it has lo, ens17)");
	test_check("mixed interface kinds are a warning", w, "net.kind", CK_WARN,
		   "gpu01: ethernet (ens17); gpu02: ethernet (ib0); gpu03: infiniband (ens17)");
	test_check("an unreachable node is named, with the reason", w, "net.probe", CK_FAIL,
		   "gpu03 cannot reach gpu01 at 10.0.0.1:4000: no answer within 2000 ms");
	test_check("a node without a listener is said", w, "net.probe", CK_FAIL, "gpu02 was not probed");
	test_check("a skewed clock", w, "clock.skew", CK_WARN, "gpu03's clock is 250.0 ms behind gpu01's");
	test_cond("a failed probe stops the collectives", !ck_coll_safe(w, why, sizeof(why)));
	drop(w);

	w = world(2, 1);
	snprintf(w->ranks[1].ifstate, sizeof(w->ranks[1].ifstate), "down");
	snprintf(w->ranks[0].ifstate, sizeof(w->ranks[0].ifstate), "virtual");
	snprintf(w->ranks[0].ifname, sizeof(w->ranks[0].ifname), "docker0");
	ck_eval_setup(w);
	test_check("a down interface", w, "net.iface", CK_FAIL, "task 1 (gpu02): GLOO_SOCKET_IFNAME=ens17 is down");
	test_check("a container bridge", w, "net.iface", CK_FAIL, "docker0 is a container or virtual bridge");
	drop(w);

	w = world(2, 1);
	snprintf(w->ranks[1].ifstate, sizeof(w->ranks[1].ifstate), "unset");
	ck_eval_setup(w);
	test_check("an unset variable is a warning", w, "net.iface", CK_WARN, "GLOO_SOCKET_IFNAME is not set");
	drop(w);

	/* one node: its loopback serves the step, and the interface is named */
	w = world(1, 2);
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].ifstate, sizeof(w->ranks[i].ifstate), "loopback");
		snprintf(w->ranks[i].ifname, sizeof(w->ranks[i].ifname), "lo");
	}
	ck_eval_setup(w);
	test_check("a loopback on one node is named and enough", w, "net.iface", CK_OK,
		   "GLOO_SOCKET_IFNAME (lo) exists, is up and has an address of the head's family on "
		   "every task (local only, enough for a step on one node)");
	drop(w);

	/* The interfaces' MTUs: one said once, several by node. */
	w = world(3, 2);
	for (int i = 0; i < 6; i++)
		w->ranks[i].ifmtu = 9000;
	ck_eval_setup(w);
	test_check("one MTU on every node is said", w, "net.iface", CK_OK,
		   "GLOO_SOCKET_IFNAME (ens17) exists, is up and has an address of the head's family on "
		   "every task; MTU 9000");
	drop(w);
	w = world(3, 1);
	w->ranks[0].ifmtu = 9000;
	w->ranks[1].ifmtu = 1500;
	w->ranks[2].ifmtu = 9000;
	ck_eval_setup(w);
	test_check("MTUs that differ are listed with their nodes", w, "net.iface", CK_OK,
		   "every task; MTU 9000 on gpu01, gpu03; 1500 on gpu02");
	drop(w);

	/* Greeted, but the bulk reply stalled: full-size packets lost on the
	 * way, each end's MTU named. */
	w = world(3, 1);
	for (int i = 0; i < 3; i++)
		w->ranks[i].ifmtu = i ? 9000 : 1500;
	w->probes[2].peers[1].ok = 0;
	w->probes[2].peers[1].bulk_short = 1;
	snprintf(w->probes[2].peers[1].err, sizeof(w->probes[2].peers[1].err),
		 "greeted, but its reply in one full-size packet (8948 bytes of TCP payload) did not come within 2000 ms");
	ck_eval_setup(w);
	test_check("lost full-size packets: both ends' MTUs named", w, "net.probe", CK_FAIL,
		   "gpu03 cannot reach gpu02 at 10.0.0.2:4000: greeted, but its reply in one full-size packet "
		   "(8948 bytes of TCP payload) did not come within 2000 ms; MTU 9000 on ens17 (gpu03), 9000 "
		   "on ens17 (gpu02)");
	test_cond("... and stop the collectives", !ck_coll_safe(w, why, sizeof(why)));
	drop(w);
}

/* The verdicts again, after a record changed. */
static void reeval(struct ck_world *w)
{
	w->nres = 0;
	ck_eval_setup(w);
}

/* net.memlock: NCCL beside RDMA devices, each task's locked-memory limit. */
static void test_memlock(void)
{
	struct ck_world *w = world(3, 2);

	w->backend = "nccl";
	ck_eval_setup(w);
	test_check("no RDMA device anywhere: OK, sockets", w, "net.memlock", CK_OK,
		   "no RDMA device (InfiniBand, RoCE) on any node: NCCL talks over sockets");
	drop(w);

	w = world(3, 2);
	w->backend = "nccl";
	for (int i = 0; i < 6; i++) {
		snprintf(w->ranks[i].rdma, sizeof(w->ranks[i].rdma), "mlx5_0,mlx5_1");
		w->ranks[i].memlock = i < 2 ? 8LL << 20 : i == 4 ? 65536 : -1;
	}
	ck_eval_setup(w);
	test_check("low limits: each node named with its least, a task and the devices", w, "net.memlock",
		   CK_FAIL, "gpu01: locked memory limited to 8 MiB (ulimit -l; task 0 and others) beside RDMA "
		   "devices mlx5_0,mlx5_1; gpu03: locked memory limited to 64 KiB (ulimit -l; task 4) beside RDMA "
		   "devices mlx5_0,mlx5_1: NCCL registers its buffers with them (ibv_reg_mr)");
	test_check("... and the fix", w, "net.memlock", CK_FAIL,
		   "PropagateResourceLimitsExcept=MEMLOCK in slurm.conf, LimitMEMLOCK=infinity in slurmd's "
		   "systemd unit");
	test_cond("... a node whose tasks are unlimited is not named", !strstr(res(w, "net.memlock")->msg, "gpu02"));
	drop(w);

	/* where NCCL leaves the devices alone, or the limit is enough */
	w = world(2, 1);
	w->backend = "nccl";
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].rdma, sizeof(w->ranks[i].rdma), "mlx5_0");
		w->ranks[i].memlock = 65536;
		snprintf(w->ranks[i].env[CK_NCCL_IB_DISABLE], DDPENV_VALLEN, "1");
		w->ranks[i].have |= 1u << CK_NCCL_IB_DISABLE;
	}
	ck_eval_setup(w);
	test_check("NCCL_IB_DISABLE=1: OK whatever the limit", w, "net.memlock", CK_OK,
		   "NCCL_IB_DISABLE=1: NCCL leaves the RDMA devices alone");
	for (int i = 0; i < 2; i++) {
		w->ranks[i].have &= ~(1u << CK_NCCL_IB_DISABLE);
		snprintf(w->ranks[i].env[CK_NCCL_NET], DDPENV_VALLEN, "Socket");
		w->ranks[i].have |= 1u << CK_NCCL_NET;
	}
	reeval(w);
	test_check("NCCL_NET=Socket: the same", w, "net.memlock", CK_OK, "NCCL_NET=Socket: NCCL leaves");
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].env[CK_NCCL_NET], DDPENV_VALLEN, "IB");
		w->ranks[i].memlock = i ? 1LL << 30 : -1;
	}
	reeval(w);
	test_check("NCCL_NET=IB with 1 GiB and unlimited: OK, the least said", w, "net.memlock", CK_OK,
		   "locked memory at least 1 GiB on the 2 tasks beside RDMA devices (mlx5_0)");
	drop(w);
}

/* env.nccl: NCCL's variables that differ between tasks, or switch a
 * transport off. */
static void test_nccl_env(void)
{
	struct ck_world *w = world(3, 2);

	ck_eval_setup(w);
	test_check("under gloo: does not apply", w, "env.nccl", CK_OK, "gloo: NCCL's variables do not apply");
	drop(w);

	w = world(3, 2);
	w->backend = "nccl";
	for (int i = 0; i < 6; i++)
		snprintf(w->ranks[i].nccl_env, sizeof(w->ranks[i].nccl_env), "NCCL_BUFFSIZE=8388608;NCCL_NVLS_ENABLE=0");
	ck_eval_setup(w);
	test_check("the same everywhere: OK, listed", w, "env.nccl", CK_OK,
		   "the same on every task: NCCL_BUFFSIZE=8388608 NCCL_NVLS_ENABLE=0");
	snprintf(w->ranks[3].nccl_env, sizeof(w->ranks[3].nccl_env),
		 "NCCL_BUFFSIZE=8388608;NCCL_NVLS_ENABLE=0;NCCL_PROTO=LL");
	snprintf(w->ranks[4].nccl_env, sizeof(w->ranks[4].nccl_env), "NCCL_BUFFSIZE=4194304;NCCL_NVLS_ENABLE=0");
	snprintf(w->ranks[5].nccl_env, sizeof(w->ranks[5].nccl_env),
		 "NCCL_BUFFSIZE=4194304;NCCL_NVLS_ENABLE=0;NCCL_P2P_DISABLE=1");
	reeval(w);
	test_check("a value that differs: the first task and the first that differs", w, "env.nccl", CK_WARN,
		   "NCCL_BUFFSIZE differs between tasks: '8388608' on task 0 (gpu01), '4194304' on task 4 "
		   "(gpu03) and others");
	test_check("... set on some tasks only", w, "env.nccl", CK_WARN,
		   "NCCL_PROTO differs between tasks: unset on task 0 (gpu01), 'LL' on task 3 (gpu02)");
	test_check("... a transport switched off", w, "env.nccl", CK_WARN,
		   "NCCL_P2P_DISABLE=1 on task 5 (gpu03) switches NVLink and PCIe peer-to-peer off");
	test_cond("... the one that agrees is not named", !strstr(res(w, "env.nccl")->msg, "NVLS"));
	drop(w);

	/* InfiniBand off where a node has none costs nothing */
	w = world(2, 1);
	w->backend = "nccl";
	for (int i = 0; i < 2; i++)
		snprintf(w->ranks[i].nccl_env, sizeof(w->ranks[i].nccl_env), "NCCL_IB_DISABLE=1");
	ck_eval_setup(w);
	test_check("NCCL_IB_DISABLE=1 without RDMA devices: OK", w, "env.nccl", CK_OK,
		   "the same on every task: NCCL_IB_DISABLE=1");
	snprintf(w->ranks[1].rdma, sizeof(w->ranks[1].rdma), "mlx5_0");
	reeval(w);
	test_check("... beside RDMA devices: WARN", w, "env.nccl", CK_WARN,
		   "NCCL_IB_DISABLE=1 on task 1 (gpu02) switches InfiniBand and RoCE off");
	drop(w);
}

/* A node still on an older ddp-check (a rolling upgrade): its record has
 * no format number, none of the newer fields, and its listener does not
 * send the full-size packet.  Said once; its tasks left out of the
 * checks that read those fields, not failed by them. */
static void test_mixed_versions(void)
{
	struct ck_world *w = world(3, 2);

	for (int i = 2; i < 4; i++) {
		w->ranks[i].proto = 0;
		w->ranks[i].version[0] = 0;
		w->ranks[i].nofile = 0;
		w->ranks[i].ifmtu = 0;
	}
	/* gpu01's prober asked gpu02 (an older listener) in vain */
	w->probes[0].peers[0].ok = 0;
	w->probes[0].peers[0].bulk_short = 1;
	snprintf(w->probes[0].peers[0].err, sizeof(w->probes[0].peers[0].err), "greeted, but ...");
	ck_eval_setup(w);
	test_check("mixed versions: rdzv.join warns, naming both", w, "rdzv.join", CK_WARN,
		   "all 6 tasks joined the rendezvous at 10.0.0.1:29512, but run different ddp-check "
		   "versions: " DDPENV_VERSION " (record format 7) on task 0 (gpu01), older (0) on task 2 (gpu02)");
	test_check("... an older listener's missing reply is no MTU failure", w, "net.probe", CK_WARN,
		   "gpu01 greeted gpu02, whose older ddp-check does not send the full-size packet asked for");
	test_check("... its tasks' missing limits fail nothing", w, "net.nofile", CK_OK, "at least 1024");
	test_check("... nor their missing process limits", w, "bind.nproc", CK_OK, "at least 63711 on every task");
	char why[256];
	test_cond("... and the collectives run", ck_coll_safe(w, why, sizeof(why)));
	drop(w);
}

/* net.shm: NCCL's segments in /dev/shm, and logind's RemoveIPC deleting
 * them under a running job. */
static void test_shm(void)
{
	struct ck_world *w = world(3, 2);

	ck_eval_setup(w);
	test_check("gloo: nothing in shared memory", w, "net.shm", CK_OK, "gloo keeps nothing in shared memory");
	w->backend = "nccl";
	reeval(w);
	test_check("NCCL, room and RemoveIPC=no: OK, the least free said", w, "net.shm", CK_OK,
		   "a 4 MiB segment made in shared memory on every task, at least 30.0 GiB free; logind "
		   "keeps users' shared memory (RemoveIPC=no)");
	/* a container's 64 MiB (docker's default), mostly taken */
	for (int i = 2; i < 4; i++) {
		w->ranks[i].shm_size = 64LL << 20;
		w->ranks[i].shm_free = i == 3 ? 20LL << 20 : 30LL << 20;
		w->ranks[i].shm_nccl = 4;
		w->ranks[i].shm_nccl_bytes = 4 * 9637888LL;
	}
	reeval(w);
	test_check("64 MiB: WARN naming the node, its worst task, the segments there and NCCL's advice", w,
		   "net.shm", CK_WARN, "gpu02: 20 MiB free of 64 MiB in /dev/shm (task 3), 4 NCCL segments "
		   "there (36 MiB: running jobs', or a crashed one's): NCCL's ranks on a node fail to start "
		   "when their segments do not fit (failed to extend /dev/shm/nccl-...); NCCL asks containers "
		   "for 1 GiB (--shm-size=1g)");
	test_cond("... the healthy nodes not named", !strstr(res(w, "net.shm")->msg, "gpu01") &&
		  !strstr(res(w, "net.shm")->msg, "gpu03"));
	char why[256];
	test_cond("... a warning: the collectives run", ck_coll_safe(w, why, sizeof(why)));
	/* a read-only /dev/shm, and one too full for a single segment */
	snprintf(w->ranks[4].shm_err, sizeof(w->ranks[4].shm_err),
		 "cannot create a file in /dev/shm: Read-only file system");
	snprintf(w->ranks[5].shm_err, sizeof(w->ranks[5].shm_err),
		 "cannot create a file in /dev/shm: Read-only file system");
	reeval(w);
	test_check("no segment can be made: FAIL naming node, error and task", w, "net.shm", CK_FAIL,
		   "gpu03: cannot create a file in /dev/shm: Read-only file system (task 4 and others): NCCL "
		   "makes its shared-memory segments there at start-up and fails without them");
	test_check("... and how a container gets one", w, "net.shm", CK_FAIL, "docker --shm-size=1g");
	test_cond("... and the collectives are not run", !ck_coll_safe(w, why, sizeof(why)) &&
		  strstr(why, "net.shm failed"));
	drop(w);

	/* logind's RemoveIPC=yes (systemd's default) on one node */
	w = world(2, 2);
	w->backend = "nccl";
	w->ranks[2].removeipc = w->ranks[3].removeipc = 1;
	ck_eval_setup(w);
	test_check("RemoveIPC=yes for a user's tasks: WARN naming the node, the user and the fix", w,
		   "net.shm", CK_WARN, "logind's RemoveIPC=yes on gpu02 removes the shared memory of a user "
		   "(uid 1000 here) when their last login session on the node ends: an ssh to a job's node "
		   "and out again deletes NCCL's segments under the running job (unlink shared memory "
		   "failed); RemoveIPC=no in /etc/systemd/logind.conf");
	drop(w);
	w = world(6, 1);
	w->backend = "nccl";
	for (int i = 0; i < 6; i++)
		w->ranks[i].removeipc = 1;
	ck_eval_setup(w);
	test_check("... on many nodes: the first four named", w, "net.shm", CK_WARN,
		   "logind's RemoveIPC=yes on gpu01, gpu02, gpu03, gpu04 and others removes");
	drop(w);
	w = world(2, 2);
	w->backend = "nccl";
	for (int i = 0; i < 4; i++) {
		w->ranks[i].removeipc = 1;
		w->ranks[i].uid = 0;
	}
	ck_eval_setup(w);
	test_check("... a system user's (root's) tasks are spared: OK, said", w, "net.shm", CK_OK,
		   "RemoveIPC=yes spares the tasks' user (uid 0, a system user)");
	/* no logind to ask, a tmpfs without a size */
	for (int i = 0; i < 4; i++) {
		w->ranks[i].removeipc = -1;
		snprintf(w->ranks[i].removeipc_err, sizeof(w->ranks[i].removeipc_err),
			 "no system bus (No such file or directory)");
		w->ranks[i].shm_size = w->ranks[i].shm_free = 0;
	}
	reeval(w);
	test_check("no system bus, no size limit: OK, both said", w, "net.shm", CK_OK,
		   "on every task, no size limit; logind's RemoveIPC not known (gpu01: no system bus (No such "
		   "file or directory))");
	/* an older ddp-check's tasks report nothing */
	for (int i = 0; i < 4; i++)
		w->ranks[i].proto = 2;
	reeval(w);
	test_check("older records only: skipped", w, "net.shm", CK_SKIP, "no task reported its shared memory");
	drop(w);
}

/* bind.threads: OpenMP's threads against each task's CPUs (2 a task here). */
static void test_threads(void)
{
	struct ck_world *w = world(2, 2);

	ck_eval_setup(w);
	test_check("unset: OpenMP takes the task's CPUs", w, "bind.threads", CK_OK, "OMP_NUM_THREADS unset");
	for (int i = 0; i < 4; i++) {
		snprintf(w->ranks[i].env[CK_OMP], DDPENV_VALLEN, i == 3 ? "8,2" : i == 2 ? "two" : "2");
		w->ranks[i].have |= 1u << CK_OMP;
	}
	reeval(w);
	test_check("more threads than CPUs (a nested list's outer count): WARN naming the task", w,
		   "bind.threads", CK_WARN, "task 3 (gpu02): OMP_NUM_THREADS=8 on 2 CPUs (2-3): its threads "
		   "take turns on them");
	test_check("... a value that is no number", w, "bind.threads", CK_WARN,
		   "task 2 (gpu02): OMP_NUM_THREADS='two': expected a positive number");
	test_cond("... the tasks within their CPUs are not named", !strstr(res(w, "bind.threads")->msg, "task 0"));
	snprintf(w->ranks[2].env[CK_OMP], DDPENV_VALLEN, "1");
	snprintf(w->ranks[3].env[CK_OMP], DDPENV_VALLEN, "2");
	reeval(w);
	test_check("within every task's CPUs: OK", w, "bind.threads", CK_OK,
		   "OMP_NUM_THREADS within each task's CPUs (at most 2)");
	drop(w);
}

/* net.nofile: gloo's full mesh in each task's open-files limit. */
static void test_nofile(void)
{
	struct ck_world *w = world(3, 2);

	w->ranks[2].nofile = 100;
	w->ranks[3].nofile = 200;
	w->ranks[5].nofile = -1;
	ck_eval_setup(w);
	test_check("a limit with little room beside the mesh: WARN, the node's least named", w,
		   "net.nofile", CK_WARN, "the open-files limit (ulimit -n) on gpu02: 100 (task 2 and "
		   "others): gloo connects every rank to every other, 5 sockets a rank at world size 6, "
		   "which leave little room for the program's own files (at least 261 wanted)");
	test_check("... and the fix", w, "net.nofile", CK_WARN,
		   "PropagateResourceLimitsExcept=NOFILE in slurm.conf with LimitNOFILE");
	drop(w);

	w = world(3, 2);
	w->ranks[4].nofile = 20;
	ck_eval_setup(w);
	test_check("a limit below the mesh itself: FAIL", w, "net.nofile", CK_FAIL,
		   "on gpu03: 20 (task 4): gloo connects every rank to every other, 5 sockets a rank at "
		   "world size 6, which leave no room for the mesh itself");
	w->backend = "nccl";
	reeval(w);
	test_check("under NCCL: no full mesh, the least limit said", w, "net.nofile", CK_OK,
		   "nccl connects each rank to a few peers (its rings and trees), not to all; the least "
		   "open-files limit 20");
	drop(w);

	w = world(2, 1);
	ck_eval_setup(w);
	test_check("Debian's 1024 at world size 2: OK", w, "net.nofile", CK_OK,
		   "open files at least 1024 on every task: room for gloo's 1 socket a rank and the program's own files");
	drop(w);
}

/* bind.nproc: the process limit holds all of the user's threads on a node. */
static void test_nproc(void)
{
	struct ck_world *w = world(3, 2);

	ck_eval_setup(w);
	test_check("Debian's limit: OK, the least room said", w, "bind.nproc", CK_OK,
		   "process limit (ulimit -u) at least 63711 on every task; the least room on gpu01: 63671 "
		   "threads, 132 wanted");
	/* gpu02: 60 threads running under a limit of 100 */
	for (int i = 2; i < 4; i++) {
		w->ranks[i].nproc = 100;
		w->ranks[i].user_threads = 60 - i;
	}
	reeval(w);
	test_check("little room beside the OpenMP threads: WARN naming the node, its count, the wants", w,
		   "bind.nproc", CK_WARN, "the process limit (ulimit -u) on gpu02: 100 (task 2 and others), 58 "
		   "threads of uid 1000 running there: room for 42, where its 2 tasks want 132 (4 for OpenMP, "
		   "64 a task for the libraries)");
	test_check("... and the fix", w, "bind.nproc", CK_WARN,
		   "raise it there (ulimit -u), or PropagateResourceLimitsExcept=NPROC in slurm.conf");
	/* gpu03: 32 OpenMP threads a task, room for 50 */
	for (int i = 4; i < 6; i++) {
		snprintf(w->ranks[i].env[CK_OMP], DDPENV_VALLEN, "32");
		w->ranks[i].have |= 1u << CK_OMP;
		w->ranks[i].nproc = 100;
		w->ranks[i].user_threads = 50;
	}
	reeval(w);
	test_check("no room for the OpenMP threads: FAIL naming that node", w, "bind.nproc", CK_FAIL,
		   "on gpu03: 100 (task 4 and others), 50 threads of uid 1000 running there: room for 50, "
		   "and its 2 tasks want 64 for OpenMP alone; it holds every thread");
	test_check("... and what fails past it", w, "bind.nproc", CK_FAIL,
		   "pthread_create and fork fail (OpenBLAS: pthread_create failed");
	test_check("... the warning's node is not in the failure", w, "bind.nproc", CK_FAIL, "alone; it holds");
	/* the count unknown: the limit alone against the wants */
	w->ranks[4].user_threads = w->ranks[5].user_threads = -1;
	reeval(w);
	test_check("an uncounted node's limit alone", w, "bind.nproc", CK_WARN,
		   "gpu02: 100 (task 2 and others), 58 threads");
	test_check("... said", w, "bind.nproc", CK_WARN,
		   "gpu03: 100 (task 4 and others) (the user's threads there not counted): room for 100, "
		   "where its 2 tasks want 192 (64 for OpenMP");
	drop(w);

	w = world(2, 1);
	for (int i = 0; i < 2; i++) {
		w->ranks[i].uid = 0;
		w->ranks[i].nproc = 10;
	}
	ck_eval_setup(w);
	test_check("root's tasks: the limit does not hold them", w, "bind.nproc", CK_OK,
		   "the tasks run as root, whom the process limit (ulimit -u) does not hold");
	for (int i = 0; i < 2; i++) {
		w->ranks[i].uid = 1000;
		w->ranks[i].nproc = -1;
	}
	reeval(w);
	test_check("unlimited: OK", w, "bind.nproc", CK_OK, "processes unlimited on every task (ulimit -u)");
	for (int i = 0; i < 2; i++)
		w->ranks[i].proto = 3;
	reeval(w);
	test_check("only older ddp-checks: skipped, saying why", w, "bind.nproc", CK_SKIP,
		   "no task's ddp-check reports its process limit (older versions)");
	drop(w);
}

/* ck_user_threads: the threads of a user's processes in a /proc tree. */
static void test_user_threads(void)
{
	char dir[] = "/tmp/test_check_proc.XXXXXX", path[256];
	static const struct { const char *pid, *status; } procs[] = {
		{ "1", "Name:\tinit\nUid:\t0\t0\t0\t0\nThreads:\t1\n" },
		{ "1200", "Name:\tpython3\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\nThreads:\t37\n" },
		/* the real uid counts, not the effective one */
		{ "1300", "Name:\tsudo\nUid:\t1000\t0\t0\t0\nThreads:\t2\n" },
		{ "1400", "Name:\tsshd\nUid:\t1001\t1001\t1001\t1001\nThreads:\t9\n" },
		/* a Name that looks like a field */
		{ "1500", "Name:\tUid: 1000\nUid:\t1001\t1001\t1001\t1001\nThreads:\t5\n" },
	};
	test_cond("a temporary /proc", mkdtemp(dir) != NULL);
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, procs[i].pid);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/%s/status", dir, procs[i].pid);
		FILE *f = fopen(path, "w");
		if (f) {
			fputs(procs[i].status, f);
			fclose(f);
		}
	}
	/* not processes: /proc's own files, and one gone since the listing */
	snprintf(path, sizeof(path), "%s/sys", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/1600", dir);
	mkdir(path, 0755);
	test_cond("uid 1000's threads: by real uid, others' left out", ck_user_threads(dir, 1000) == 39);
	test_cond("uid 1001's", ck_user_threads(dir, 1001) == 14);
	test_cond("a user with none: 0", ck_user_threads(dir, 4242) == 0);
	test_cond("no /proc: -1", ck_user_threads("/nonexistent/proc", 1000) == -1);
	test_cond("this machine's /proc: this process's own thread at least",
		  ck_user_threads("/proc", (long)getuid()) >= 1);
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s/status", dir, procs[i].pid);
		unlink(path);
		snprintf(path, sizeof(path), "%s/%s", dir, procs[i].pid);
		rmdir(path);
	}
	snprintf(path, sizeof(path), "%s/sys", dir);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/1600", dir);
	rmdir(path);
	rmdir(dir);
}

static void test_binding_faults(void)
{
	struct ck_world *w = world(2, 2);

	snprintf(w->ranks[1].cpus, sizeof(w->ranks[1].cpus), "1-2");
	ck_eval_setup(w);
	test_check("overlapping CPUs with one idle: FAIL", w, "bind.cpus", CK_FAIL,
		   "gpu01: task 0 (CPUs 0-1) and task 1 (CPUs 1-2) overlap on 1, while no task uses CPUs 3");
	drop(w);

	w = world(1, 3);
	for (int i = 0; i < 3; i++) {
		snprintf(w->ranks[i].allowed, sizeof(w->ranks[i].allowed), "0-1");
		snprintf(w->ranks[i].cpus, sizeof(w->ranks[i].cpus), "%d", i % 2);
	}
	ck_eval_setup(w);
	test_check("more tasks than CPUs, all used: WARN", w, "bind.cpus", CK_WARN,
		   "gpu01: tasks 0 and 2 share CPUs 0: 3 tasks on 2 CPUs");
	drop(w);

	w = world(1, 2);
	for (int i = 0; i < 2; i++)
		snprintf(w->ranks[i].cpus, sizeof(w->ranks[i].cpus), "0-3");
	ck_eval_setup(w);
	test_check("unbound tasks: WARN", w, "bind.cpus", CK_WARN, "gpu01: 2 tasks are not bound, each may run on all of CPUs 0-3");
	drop(w);

	w = world(1, 2);
	w->ranks[1].cpus[0] = 0;
	ck_eval_setup(w);
	test_check("no CPU at all", w, "bind.cpus", CK_FAIL, "task 1 (gpu01) has no CPU");
	drop(w);

	w = world(1, 2);
	snprintf(w->ranks[1].cpus, sizeof(w->ranks[1].cpus), "0-4294967295");
	snprintf(w->ranks[0].cpus, sizeof(w->ranks[0].cpus), "0-");
	ck_eval_setup(w);
	test_check("a CPU list beyond any machine is refused, not allocated", w, "bind.cpus", CK_FAIL,
		   "task 0 (gpu01) has no CPU ('0-'); task 1 (gpu01) has no CPU ('0-4294967295')");
	drop(w);

	w = world(1, 4);
	with_gpus(w, 4);
	ck_eval_setup(w);
	test_check("GPUs near their tasks", w, "bind.locality", CK_OK, "each of 4 tasks runs on CPUs near its GPU");
	test_check("one task per GPU", w, "bind.gpus", CK_OK, "each of 4 GPUs is used by exactly one task");
	test_check("all GPUs visible", w, "bind.visible", CK_OK, "peer access possible");
	drop(w);

	w = world(1, 4);
	with_gpus(w, 4);
	snprintf(w->ranks[3].cpus, sizeof(w->ranks[3].cpus), "0-1");
	snprintf(w->ranks[0].cpus, sizeof(w->ranks[0].cpus), "6-7");
	snprintf(w->ranks[2].gpu, sizeof(w->ranks[2].gpu), "0000:43:00.0");
	w->ranks[1].visible = 1;
	snprintf(w->ranks[1].env[CK_CVD], DDPENV_VALLEN, "1");
	ck_eval_setup(w);
	test_check("CPUs far from the GPU", w, "bind.locality", CK_WARN,
		   "task 0 (gpu01): CPUs 6-7 (NUMA 0) are far from its GPU 0000:1b:00.0 (NUMA 0, near: 0-1)");
	test_check("a GPU shared by two tasks is a warning under gloo", w, "bind.gpus", CK_WARN,
		   "gpu01: GPU 0000:43:00.0 is used by tasks 1 and 2");
	test_check("and an unused GPU is said", w, "bind.gpus", CK_WARN, "gpu01: 1 of the step's 4 GPUs there are used by no task");
	test_check("a narrowed CUDA_VISIBLE_DEVICES", w, "bind.visible", CK_WARN,
		   "task 1 (gpu01) sees 1 of the step's 4 GPUs there: no CUDA peer access");
	w->nres = 0;
	w->backend = "nccl";
	ck_eval_setup(w);
	test_check("a GPU shared by two tasks fails under nccl", w, "bind.gpus", CK_FAIL,
		   "GPU 0000:43:00.0 is used by tasks 1 and 2");
	drop(w);

	w = world(1, 2);
	with_gpus(w, 2);
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].gpu_near, sizeof(w->ranks[i].gpu_near), "0");
		snprintf(w->ranks[i].cpus, sizeof(w->ranks[i].cpus), "0");
	}
	ck_eval_setup(w);
	test_check("two tasks sharing the one CPU near their GPUs: WARN", w, "bind.cpus", CK_WARN,
		   "gpu01: tasks 0 and 1 share CPUs 0 near their GPUs");
	drop(w);

	w = world(1, 2);
	w->backend = "nccl";
	snprintf(w->ranks[1].backend_err, sizeof(w->ranks[1].backend_err), "no CUDA device visible");
	w->ranks[0].nccl_version = 22105;
	ck_eval_setup(w);
	test_check("a task without NCCL or a GPU", w, "coll.backend", CK_FAIL, "task 1 (gpu01): no CUDA device visible");
	drop(w);
}

/* A fake /proc/driver/nvidia/gpus: one directory per GPU, named by its bus
 * id, with the driver's "information" file. */
static void nv_gpu(const char *dir, const char *name, const char *minor, const char *bus)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/information", dir, name);
	FILE *f = fopen(path, "w");
	fprintf(f, "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 42\nGPU UUID: \t GPU-0\n"
		"Bus Type: \t PCIe\nDMA Mask: \t 0xfffffffffffff\n");
	if (bus)
		fprintf(f, "Bus Location: \t %s\n", bus);
	if (minor)
		fprintf(f, "Device Minor: \t %s\n", minor);
	fprintf(f, "GPU Excluded:\t No\n");
	fclose(f);
}

static void test_nvidia(void)
{
	char dir[] = "/tmp/ddp-check-nvXXXXXX", out[960], err[256], sub[600];
	struct ddpenv_nvgpu g[8];
	test_cond("a temporary directory", mkdtemp(dir) != NULL);
	snprintf(sub, sizeof(sub), "%s/gpus", dir);
	test_cond("no driver list (no directory): 0 GPUs, no error",
		  ck_nvidia_read(sub, out, sizeof(out), err, sizeof(err)) == 0 && out[0] == 0);
	mkdir(sub, 0755);
	nv_gpu(sub, "0000:61:00.0", "3", "0000:61:00.0");
	nv_gpu(sub, "0000:1B:00.0", "0", "0000:1B:00.0");
	nv_gpu(sub, "0000:43:00.0", "1", NULL);   /* the directory's name serves */
	nv_gpu(sub, "0000:52:00.0", "2", "00000000:52:00.0");
	int n = ck_nvidia_read(sub, out, sizeof(out), err, sizeof(err));
	test_cond("four GPUs read", n == 4);
	test_streq("by minor, bus ids as hwloc writes them", out,
		   "0=0000:1b:00.0,1=0000:43:00.0,2=0000:52:00.0,3=0000:61:00.0");
	test_cond("the text parses back", ck_nvidia_parse(out, g, 8) == 4 && g[3].minor == 3 &&
		  !strcmp(g[3].busid, "0000:61:00.0"));
	test_cond("not such a list: -1", ck_nvidia_parse("0=0000:1b:00.0,x", g, 8) < 0 &&
		  ck_nvidia_parse("0=gpu0", g, 8) < 0 && ck_nvidia_parse("0=0000:1b:00.0,1=0000:43:00.0", g, 1) < 0);
	char bus[DDPENV_BUSIDLEN];
	test_cond("CUDA's bus id in hwloc's form", ddpenv_busid_norm("00000000:1B:00.0", bus, sizeof(bus)) == 0 &&
		  !strcmp(bus, "0000:1b:00.0"));
	test_cond("not a bus id: refused", ddpenv_busid_norm("gpu0", bus, sizeof(bus)) < 0 &&
		  ddpenv_busid_norm("0000:1b:00.0x", bus, sizeof(bus)) < 0 &&
		  ddpenv_busid_norm("0000:1b:20.0", bus, sizeof(bus)) < 0);
	/* an excluded GPU (NVreg_ExcludedGpus) travels with its mark */
	nv_gpu(sub, "0000:10:00.0", "4", "0000:10:00.0");
	char cmd0[700];
	snprintf(cmd0, sizeof(cmd0), "sed -i 's/^GPU Excluded:.*/GPU Excluded:\\t Yes/' '%s/0000:10:00.0/information'", sub);
	test_cond("... marked excluded", system(cmd0) == 0);
	test_cond("five GPUs read", ck_nvidia_read(sub, out, sizeof(out), err, sizeof(err)) == 5);
	test_streq("the excluded one marked /x", out,
		   "0=0000:1b:00.0,1=0000:43:00.0,2=0000:52:00.0,3=0000:61:00.0,4=0000:10:00.0/x");
	test_cond("... and parsed back", ck_nvidia_parse(out, g, 8) == 5 && g[4].excluded && !g[3].excluded &&
		  !strcmp(g[4].busid, "0000:10:00.0") && ck_nvidia_parse("0=0000:1b:00.0/y", g, 8) < 0);
	snprintf(cmd0, sizeof(cmd0), "rm -r '%s/0000:10:00.0'", sub);
	test_cond("... removed", system(cmd0) == 0);
	nv_gpu(sub, "0000:70:00.0", "seven", "0000:70:00.0");
	test_cond("a bad Device Minor is an error", ck_nvidia_read(sub, out, sizeof(out), err, sizeof(err)) < 0);
	test_err("naming the file and the value", err, "0000:70:00.0/information: Device Minor 'seven': expected 0-255");
	nv_gpu(sub, "0000:70:00.0", NULL, "0000:70:00.0");
	test_cond("no Device Minor line is an error", ck_nvidia_read(sub, out, sizeof(out), err, sizeof(err)) < 0);
	test_err("saying which line is missing", err, "0000:70:00.0/information: no Device Minor line");
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	test_cond("the temporary directory is removed", system(cmd) == 0);
}

/* Slurm's GPU numbers (device minors) against the driver's bus ids. */
static void test_gres(void)
{
	static const char inorder[] = "0=0000:1b:00.0,1=0000:43:00.0,2=0000:52:00.0,3=0000:61:00.0";
	struct ck_world *w = world(1, 4);
	ck_eval_setup(w);
	test_check("no GPUs, no driver: nothing to check", w, "bind.gres", CK_OK, "no GPUs in this step");
	drop(w);

	w = world(1, 4);
	with_gpus(w, 4);
	ck_eval_setup(w);
	test_check("GPUs but no driver list on any node: SKIP", w, "bind.gres", CK_SKIP,
		   "no node has the NVIDIA driver's GPU list (/proc/driver/nvidia/gpus)");

	/* nccl: CUDA says which GPU each task opened; the plan said which it should */
	w->nres = 0;
	w->backend = "nccl";
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		snprintf(r->env[CK_GPU_BUSID], DDPENV_VALLEN, "%s", r->gpu);
		r->have |= 1u << CK_GPU_BUSID;
		snprintf(r->gpu_from, sizeof(r->gpu_from), "CUDA device %d", i);
	}
	ck_eval_setup(w);
	test_check("each task opened the GPU planned for it: OK without the driver's list", w, "bind.gres",
		   CK_OK, "each task opened the GPU planned for it (DDP_GPU_BUSID); no node has the NVIDIA "
		   "driver's GPU list");
	w->nres = 0;
	snprintf(w->ranks[0].env[CK_GPU_BUSID], DDPENV_VALLEN, "0000:9d:00.0");
	ck_eval_setup(w);
	test_check("a task that opened another GPU than planned: FAIL naming both", w, "bind.gres", CK_FAIL,
		   "task 0 (gpu01) opened GPU 0000:1b:00.0 (CUDA device 0), but slurm-ddp planned 0000:9d:00.0 "
		   "(DDP_GPU_BUSID) and bound its CPUs near that one: CUDA_VISIBLE_DEVICES=0,1,2,3 names other "
		   "GPUs than the plan");
	w->nres = 0;
	w->backend = "gloo";
	ck_eval_setup(w);
	test_check("... under gloo no GPU was opened: not checked", w, "bind.gres", CK_SKIP, "no node has");
	drop(w);

	w = world(2, 4);
	with_gpus(w, 4);
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		snprintf(r->nvgpus, sizeof(r->nvgpus), "%s", inorder);
		snprintf(r->env[CK_STEP_GPUS], DDPENV_VALLEN, "0,1,2,3");
		r->have |= 1u << CK_STEP_GPUS;
	}
	ck_eval_setup(w);
	test_check("minors in bus order, every task on one of the step's GPUs", w, "bind.gres", CK_OK,
		   "the NVIDIA driver's device numbers follow PCI bus order on 2 nodes, and every task's GPU "
		   "is one Slurm gave the step");

	/* node 2's driver numbered its first two GPUs the other way round */
	w->nres = 0;
	for (int i = 4; i < 8; i++)
		snprintf(w->ranks[i].nvgpus, sizeof(w->ranks[i].nvgpus),
			 "0=0000:43:00.0,1=0000:1b:00.0,2=0000:52:00.0,3=0000:61:00.0");
	ck_eval_setup(w);
	test_check("minors out of bus order, gres_order bus (AutoDetect=nvml): OK, saying what a hand-written "
		   "gres.conf would need", w, "bind.gres", CK_OK,
		   "Slurm's GPU numbers taken in PCI bus order (gres_order bus, as AutoDetect=nvml numbers them) "
		   "on 2 nodes, where the NVIDIA driver's device numbers do not follow bus order (gpu02, ...: a "
		   "gres.conf listing File=/dev/nvidia[0-N] there needs gres_order: minor)");
	w->nres = 0;
	for (int i = 4; i < 8; i++)
		w->ranks[i].gres_order = DDPENV_GRES_ORDER_MINOR;
	ck_eval_setup(w);
	test_check("... gres_order minor: WARN naming the node and the devices", w, "bind.gres", CK_WARN,
		   "gpu02: gres_order minor, and the NVIDIA driver's device numbers do not follow PCI bus order "
		   "(0000:1b:00.0 is /dev/nvidia1, 0000:43:00.0 is /dev/nvidia0, 0000:52:00.0 is /dev/nvidia2, "
		   "0000:61:00.0 is /dev/nvidia3)");
	test_check("and why it matters", w, "bind.gres", CK_WARN,
		   "mean other GPUs to CUDA (CUDA_DEVICE_ORDER=PCI_BUS_ID) than to Slurm");
	for (int i = 4; i < 8; i++)
		w->ranks[i].gres_order = DDPENV_GRES_ORDER_BUS;

	/* an excluded GPU out of order is not CUDA's: no WARN for it; a step
	 * given it is told CUDA cannot open it */
	w->nres = 0;
	for (int i = 4; i < 8; i++)
		snprintf(w->ranks[i].nvgpus, sizeof(w->ranks[i].nvgpus),
			 "0=0000:1b:00.0,1=0000:43:00.0,2=0000:52:00.0,3=0000:61:00.0,4=0000:10:00.0/x");
	ck_eval_setup(w);
	test_check("an excluded GPU out of bus order is not counted", w, "bind.gres", CK_OK,
		   "follow PCI bus order on 2 nodes");
	w->nres = 0;
	snprintf(w->ranks[5].env[CK_STEP_GPUS], DDPENV_VALLEN, "1,4");
	ck_eval_setup(w);
	test_check("Slurm's GPU 4 beside an excluded GPU: past the 4 CUDA can open, WARN", w, "bind.gres", CK_WARN,
		   "task 5 (gpu02): SLURM_STEP_GPUS=1,4 names GPU 4, but the NVIDIA driver there lists 4 GPUs "
		   "CUDA can open");
	snprintf(w->ranks[5].env[CK_STEP_GPUS], DDPENV_VALLEN, "0,1,2,3");

	/* a container (pyxis) lists only its GPUs: numbers with holes, in order */
	w->nres = 0;
	for (int i = 0; i < 8; i++) {
		snprintf(w->ranks[i].nvgpus, sizeof(w->ranks[i].nvgpus), "1=0000:43:00.0,3=0000:61:00.0");
		snprintf(w->ranks[i].env[CK_STEP_GPUS], DDPENV_VALLEN, "1,3");
		snprintf(w->ranks[i].gpu, sizeof(w->ranks[i].gpu), "%s", i % 2 ? "0000:61:00.0" : "0000:43:00.0");
	}
	ck_eval_setup(w);
	test_check("a container's partial list with holes in the numbers is no error, and not checked", w,
		   "bind.gres", CK_OK, "the NVIDIA driver lists only some GPUs, with holes in their device numbers, "
		   "on gpu01 and others (a container's own GPUs?): Slurm's node-wide GPU numbers are not checked");
	with_gpus(w, 4);
	for (int i = 0; i < 8; i++)
		snprintf(w->ranks[i].env[CK_STEP_GPUS], DDPENV_VALLEN, "0,1,2,3");

	/* the step has /dev/nvidia0 and 1 on node 1, but task 2 runs on 0000:52:00.0 */
	w->nres = 0;
	for (int i = 0; i < 8; i++)
		snprintf(w->ranks[i].nvgpus, sizeof(w->ranks[i].nvgpus), "%s", inorder);
	snprintf(w->ranks[2].env[CK_STEP_GPUS], DDPENV_VALLEN, "0,1");
	snprintf(w->ranks[2].gpu_from, sizeof(w->ranks[2].gpu_from), "DDP_GPU_BUSID");
	ck_eval_setup(w);
	test_check("a task on a GPU the step was not given: WARN under gloo (the plan said so)", w,
		   "bind.gres", CK_WARN, "task 2 (gpu01) uses GPU 0000:52:00.0 (from DDP_GPU_BUSID), not one of "
		   "the step's: SLURM_STEP_GPUS=0,1 is 0000:1b:00.0 (/dev/nvidia0), 0000:43:00.0 (/dev/nvidia1) "
		   "in gres_order bus");
	w->nres = 0;
	w->backend = "nccl";
	ck_eval_setup(w);
	test_check("FAIL under nccl (CUDA opened it)", w, "bind.gres", CK_FAIL, "task 2 (gpu01) uses GPU 0000:52:00.0");

	w->nres = 0;
	snprintf(w->ranks[5].env[CK_STEP_GPUS], DDPENV_VALLEN, "0,7");
	snprintf(w->ranks[6].env[CK_STEP_GPUS], DDPENV_VALLEN, "gpu0");
	ck_eval_setup(w);
	test_check("a GPU number past the driver's list", w, "bind.gres", CK_FAIL,
		   "task 5 (gpu02): SLURM_STEP_GPUS=0,7 names GPU 7, but the NVIDIA driver there lists 4 GPUs "
		   "CUDA can open");
	test_check("a SLURM_STEP_GPUS that is not numbers", w, "bind.gres", CK_FAIL,
		   "task 6 (gpu02): SLURM_STEP_GPUS=gpu0 is not a list of GPU numbers");

	w->nres = 0;
	w->backend = "gloo";
	for (int i = 4; i < 8; i++) {
		w->ranks[i].nvgpus[0] = 0;
		snprintf(w->ranks[i].nvgpus_err, sizeof(w->ranks[i].nvgpus_err),
			 "/proc/driver/nvidia/gpus/0000:1b:00.0/information: Permission denied");
	}
	ck_eval_setup(w);
	test_check("a driver list that could not be read is said", w, "bind.gres", CK_WARN,
		   "gpu02: the NVIDIA driver's GPU list could not be read: /proc/driver/nvidia/gpus/0000:1b:00.0/"
		   "information: Permission denied");

	/* the table travels in the rank's record */
	char buf[16384];
	struct ck_rank back;
	int n = ck_rank_encode(&w->ranks[0], buf, sizeof(buf));
	test_cond("the driver's list survives the record", n > 0 && ck_rank_decode(&back, buf, (size_t)n) == 0 &&
		  !strcmp(back.nvgpus, inorder) && !back.nvgpus_err[0]);
	drop(w);
}

static void test_coll_faults(void)
{
	struct ck_world *w = world(2, 1);

	ck_eval_setup(w);
	ran(w, 1e-3);
	w->colls[1].ok = 0;
	snprintf(w->colls[1].msg, sizeof(w->colls[1].msg), "all-reduce of 4096 floats WRONG at 7 elements");
	w->colls[0].have = 0;
	w->opts.min_busbw = 5;
	ck_eval_coll(w);
	test_check("a wrong sum names the task", w, "coll.allreduce", CK_FAIL,
		   "task 0 (gpu01) did not report its result; task 1 (gpu02): all-reduce of 4096 floats WRONG");
	test_check("busbw below --min-busbw", w, "coll.busbw", CK_FAIL,
		   "busbw 0.00 GB/s at 1024 bytes is below --min-busbw 5.00 GB/s");
	test_cond("the slowest time is the max over tasks", ck_time_max(w, w->nsizes - 1) == 1e-3);
	drop(w);

	/* task 2 could not start gloo; 0 and 1 timed out waiting for its
	 * address: the cause first */
	w = world(3, 1);
	ck_eval_setup(w);
	ran(w, 1e-3);
	for (int i = 0; i < 3; i++) {
		w->colls[i].ok = 0;
		snprintf(w->colls[i].msg, sizeof(w->colls[i].msg), i == 2 ?
			 "gloo: rank 2 could not connect its full mesh on ens17: Resource temporarily unavailable" : i == 0 ?
			 "gloo: rank 0 could not connect its full mesh on ens17: rank 0: store at 10.0.0.1:29512: "
			 "waiting for 'gloo/2': timed out after 60 s" :
			 "gloo: rank 1 could not connect its full mesh on ens17: a peer failed first (gloo: rank 2 ...)");
	}
	ck_eval_coll(w);
	test_check("the task that failed of itself first, then those that waited for it", w, "coll.allreduce",
		   CK_FAIL, "task 2 (gpu03): gloo: rank 2 could not connect its full mesh on ens17: Resource "
		   "temporarily unavailable; task 0 (gpu01): gloo: rank 0 could not connect its full mesh on "
		   "ens17: rank 0: store at 10.0.0.1:29512: waiting for 'gloo/2': timed out after 60 s; task 1 ");
	drop(w);

	/* task 2 killed mid-sweep: its peers' all-reduce failed on its closed
	 * connection, and task 0 stopped waiting for its record when the store
	 * saw it close: the dead task first, then the others; the first
	 * all-reduce's time is not judged without every task's */
	unsigned char gone[3] = { 0, 0, CK_GONE_DIED };
	w = world(3, 1);
	w->gone = gone;
	ck_eval_setup(w);
	ran(w, 1e-3);
	w->colls[2].have = 0;
	for (int i = 0; i < 2; i++) {
		w->colls[i].ok = 0;
		snprintf(w->colls[i].msg, sizeof(w->colls[i].msg), "bandwidth sweep failed: NCCL all-reduce: remote "
			 "process exited or there was a network error");
	}
	ck_eval_coll(w);
	test_check("a task that died before its result first, then those it failed", w, "coll.allreduce", CK_FAIL,
		   "task 2 (gpu03) died before it reported its result (its connection to the rendezvous closed: "
		   "killed, or crashed); task 0 (gpu01): bandwidth sweep failed: NCCL all-reduce: remote process "
		   "exited or there was a network error; task 1 (gpu02): bandwidth sweep failed");
	test_check("the first all-reduce's time: not every task's", w, "time.first_collective", CK_SKIP,
		   "1 of 3 tasks did not report a completed all-reduce (coll.allreduce)");
	drop(w);
	/* one that stopped on its own error before its result */
	memset(gone, 0, sizeof(gone));
	gone[1] = CK_GONE_LEFT;
	w = world(2, 1);
	w->gone = gone;
	ck_eval_setup(w);
	ran(w, 1e-3);
	w->colls[1].have = 0;
	ck_eval_coll(w);
	test_check("a task that left before its result", w, "coll.allreduce", CK_FAIL,
		   "task 1 (gpu02) stopped before it reported its result (its stderr says why)");
	drop(w);
}

/* MIG devices: each task sees its own (CUDA opens one per process), named
 * by UUID; their GPU is known only where CUDA said (--ddp=nccl). */
static void with_migs(struct ck_world *w, int per, int shown_all)
{
	static const char *const mig[] = { "MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d",
					   "MIG-5b2c3d4e-6f70-5b8c-9dae-1f2a3b4c5d6e" };
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		int lr = i % per;
		r->step_gpus = per;
		r->visible = shown_all ? per : 1;
		if (shown_all)
			snprintf(r->env[CK_CVD], sizeof(r->env[CK_CVD]), "%s,%s", mig[0], mig[1]);
		else
			snprintf(r->env[CK_CVD], sizeof(r->env[CK_CVD]), "%s", mig[lr % 2]);
		snprintf(r->mig, sizeof(r->mig), "%s", shown_all ? mig[0] : mig[lr % 2]);
		snprintf(r->env[CK_STEP_GPUS], sizeof(r->env[CK_STEP_GPUS]), "5,6");
		r->have |= 1u << CK_CVD | 1u << CK_STEP_GPUS;
	}
}

static void test_mig(void)
{
	struct ck_world *w = world(1, 2);
	with_migs(w, 2, 0);
	ck_eval_setup(w);
	test_check("MIG, one each: bind.gpus OK", w, "bind.gpus", CK_OK, "each of 2 MIG devices is used by exactly one task");
	test_check("... bind.visible OK, no peer access to ask for", w, "bind.visible", CK_OK,
		   "every task sees its own MIG device only");
	test_check("... bind.locality not checked", w, "bind.locality", CK_SKIP, "MIG devices");
	test_check("... bind.gres: MIG GRES numbers not mapped", w, "bind.gres", CK_OK,
		   "the step's GPUs are MIG devices, which Slurm names by UUID");
	test_cond("... nothing else said", count_level(w, CK_FAIL) == 0 && count_level(w, CK_WARN) == 0);
	drop(w);

	/* Without srun --ddp: both tasks shown both, and CUDA opens the first. */
	w = world(1, 2);
	with_migs(w, 2, 1);
	ck_eval_setup(w);
	test_check("MIG, all shown: the tasks share the first", w, "bind.gpus", CK_WARN,
		   "gpu01: MIG device MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d is used by tasks 0 and 1 "
		   "(CUDA opens the first MIG device");
	test_check("... and bind.visible says why", w, "bind.visible", CK_WARN,
		   "task 0 (gpu01) is shown 2 MIG devices (CUDA_VISIBLE_DEVICES=MIG-4a1b2c3d");
	drop(w);

	/* NCCL: CUDA said both are on one GPU. */
	w = world(1, 2);
	w->backend = "nccl";
	with_migs(w, 2, 0);
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].gpu, sizeof(w->ranks[i].gpu), "0000:1b:00.0");
		snprintf(w->ranks[i].gpu_near, sizeof(w->ranks[i].gpu_near), "0-3");
		snprintf(w->ranks[i].gpu_from, sizeof(w->ranks[i].gpu_from), "CUDA device 0");
	}
	ck_eval_setup(w);
	test_check("MIG devices of one GPU under nccl: FAIL", w, "bind.gpus", CK_FAIL,
		   "gpu01: tasks 0 and 1 run on MIG devices of one GPU (0000:1b:00.0): NCCL does not run two "
		   "ranks on one GPU; use --ddp=gloo");
	test_check("... their locality checked (CUDA named the GPU)", w, "bind.locality", CK_OK,
		   "each of 2 tasks runs on CPUs near its GPU");
	drop(w);
}

/* GPUs with no bus id (no topology places them, CUDA not asked), each
 * task shown cvd; share: "shard" or "mps" for Slurm's GPU sharing GRES. */
static void with_cvd(struct ck_world *w, const char *cvd, int step_gpus, const char *share)
{
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		int n = 1;
		for (const char *p = cvd; (p = strchr(p, ',')); p++)
			n++;
		snprintf(r->env[CK_CVD], sizeof(r->env[CK_CVD]), "%s", cvd);
		r->have |= 1u << CK_CVD;
		r->visible = n;
		r->step_gpus = step_gpus;
		if (share) {
			int k = !strcmp(share, "shard") ? CK_SHARDS : CK_MPS;
			snprintf(r->env[k], sizeof(r->env[k]), "%s", k == CK_SHARDS ? "2" : "50");
			r->have |= 1u << k;
		}
	}
}

static void test_shared_gpus(void)
{
	/* The plugin's permutation: each task's GPU at LOCAL_RANK. */
	struct ck_world *w = world(1, 2);
	with_cvd(w, "1,0", 2, NULL);   /* task 0 on GPU 1, task 1 on GPU 0 */
	ck_eval_setup(w);
	test_check("no bus ids: GPUs told apart by CUDA_VISIBLE_DEVICES at LOCAL_RANK", w, "bind.gpus",
		   CK_OK, "each of 2 GPUs is used by exactly one task (GPUs named by CUDA_VISIBLE_DEVICES: "
		   "no topology places them");
	test_check("... their locality not checked, and said why", w, "bind.locality", CK_SKIP,
		   "the tasks' GPUs have no PCI bus id");
	drop(w);

	/* Two tasks whose lists put one GPU at their LOCAL_RANK. */
	w = world(1, 2);
	with_cvd(w, "0,1", 2, NULL);
	snprintf(w->ranks[0].env[CK_CVD], sizeof(w->ranks[0].env[CK_CVD]), "1,0");
	ck_eval_setup(w);
	test_check("no bus ids, one GPU at both LOCAL_RANKs: WARN", w, "bind.gpus", CK_WARN,
		   "gpu01: GPU 1 of CUDA_VISIBLE_DEVICES is used by tasks 0 and 1; gpu01: 1 of the step's 2 "
		   "GPUs there are used by no task");
	drop(w);

	w = world(1, 2);
	with_cvd(w, "0", 1, NULL);
	ck_eval_setup(w);
	test_check("one GPU, two tasks, no sharing GRES: WARN under gloo", w, "bind.gpus", CK_WARN,
		   "gpu01: GPU 0 of CUDA_VISIBLE_DEVICES is used by tasks 0 and 1 (GPUs named by");
	drop(w);

	/* gres/shard: sharing is what was asked for. */
	w = world(2, 3);
	with_cvd(w, "0", 1, "shard");
	ck_eval_setup(w);
	test_check("gres/shard under gloo: OK, the sharers named once per GPU", w, "bind.gpus", CK_OK,
		   "GPUs shared as gres/shard gave them: gpu01: GPU 0 of CUDA_VISIBLE_DEVICES by tasks 0, 1, 2; "
		   "gpu02: GPU 0 of CUDA_VISIBLE_DEVICES by tasks 3, 4, 5 (GPUs named by");
	drop(w);

	w = world(1, 2);
	with_cvd(w, "0", 1, "mps");
	w->backend = "nccl";
	for (int i = 0; i < 2; i++) {
		snprintf(w->ranks[i].gpu, sizeof(w->ranks[i].gpu), "0000:1b:00.0");
		snprintf(w->ranks[i].gpu_from, sizeof(w->ranks[i].gpu_from), "CUDA device 0");
	}
	ck_eval_setup(w);
	test_check("gres/mps under nccl: FAIL, and says why", w, "bind.gpus", CK_FAIL,
		   "gpu01: GPU 0000:1b:00.0 is used by tasks 0 and 1 (shares of it from gres/mps: NCCL runs "
		   "one rank per GPU; use --ddp=gloo)");
	drop(w);

	/* A record carries the sharing variables. */
	w = world(1, 1);
	with_cvd(w, "0", 1, "shard");
	char buf[16384];
	struct ck_rank back;
	int n = ck_rank_encode(&w->ranks[0], buf, sizeof(buf));
	test_cond("a record round trip keeps SLURM_SHARDS_ON_NODE",
		  n > 0 && ck_rank_decode(&back, buf, (size_t)n) == 0 && back.have & 1u << CK_SHARDS &&
		  !strcmp(back.env[CK_SHARDS], "2"));
	drop(w);
}

/* A listener that greets as nodeF and then sends nothing: what a prober
 * sees where small packets pass and full-size ones are lost. */
static void *greet_only(void *arg)
{
	int l = *(int *)arg, c = accept(l, NULL, NULL);
	char b[64];

	if (c < 0)
		return NULL;
	if (send(c, "ddp-check nodeF\n", 16, MSG_NOSIGNAL) == 16)
		while (recv(c, b, sizeof(b), 0) > 0)
			; /* the 'B' asked for, unanswered, until the prober hangs up */
	close(c);
	return NULL;
}

/* The probe mesh over loopback, each way a peer can answer: a ddp-check
 * listener of the expected node (reached, its bulk reply whole, its clock
 * measured), another node's listener at that address, a closed port, a
 * port whose program accepts and never greets (TCP gets through: not the
 * network), and one that greets and then sends nothing more (the full-size
 * packets lost). */
static void test_probe(void)
{
	struct ck_listener a, b;
	char err[256] = "";
	int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);

	int greeter = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in ga = sa;
	socklen_t gl = sizeof(ga);
	pthread_t gt;

	if (ck_listen_start(&a, "127.0.0.1", "nodeA", err, sizeof(err)) < 0 ||
	    ck_listen_start(&b, "127.0.0.1", "nodeB", err, sizeof(err)) < 0 || silent < 0 ||
	    bind(silent, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(silent, 4) < 0 ||
	    getsockname(silent, (struct sockaddr *)&sa, &sl) < 0 || greeter < 0 ||
	    bind(greeter, (struct sockaddr *)&ga, sizeof(ga)) < 0 || listen(greeter, 4) < 0 ||
	    getsockname(greeter, (struct sockaddr *)&ga, &gl) < 0 ||
	    pthread_create(&gt, NULL, greet_only, &greeter) != 0) {
		test_cond("probe: loopback listeners start", 0);
		printf("#   %s\n", err);
		return;
	}
	struct ck_target t[5] = { { .node = "nodeA", .head = 1 }, { .node = "nodeC" }, { .node = "nodeD" },
				  { .node = "nodeE" }, { .node = "nodeF" } };
	snprintf(t[0].addr, sizeof(t[0].addr), "%s", a.endpoint);
	snprintf(t[1].addr, sizeof(t[1].addr), "%s", b.endpoint);
	snprintf(t[2].addr, sizeof(t[2].addr), "127.0.0.1:%d", test_free_port());
	snprintf(t[3].addr, sizeof(t[3].addr), "127.0.0.1:%d", ntohs(sa.sin_port));
	snprintf(t[4].addr, sizeof(t[4].addr), "127.0.0.1:%d", ntohs(ga.sin_port));
	struct ck_probe p;
	test_cond("probe: runs", ck_probe_run(t, 5, 300, &p) == 0 && p.npeers == 5);
	if (p.npeers == 5) {
		test_cond("probe: the expected node's listener is reached", p.peers[0].ok && p.peers[0].rtt_us > 0);
		if (!p.peers[0].ok)
			printf("#   %s\n", p.peers[0].err);
		test_cond("probe: the head's clock measured, this machine's own (|offset| < 50 ms)",
			  p.have_clock && p.clock_off_us > -50000 && p.clock_off_us < 50000);
		test_cond("probe: another node answering is no success", !p.peers[1].ok);
		test_err("probe: another node answering is named", p.peers[1].err, "nodeB answered instead");
		test_cond("probe: a closed port is no success", !p.peers[2].ok);
		test_err("probe: a closed port is refused", p.peers[2].err, "connection refused");
		test_cond("probe: a silent program is no success", !p.peers[3].ok);
		test_err("probe: a silent program: connected, no greeting (not a network fault)",
			 p.peers[3].err, "connected, but no greeting within 300 ms");
		test_cond("probe: greeted, then nothing: no success, marked", !p.peers[4].ok &&
			  p.peers[4].bulk_short && !p.peers[0].bulk_short && !p.peers[3].bulk_short);
		test_err("probe: greeted, then nothing: full-size packets lost", p.peers[4].err,
			 "greeted, but its reply in one full-size packet (");
		test_err("... naming the wait and what it means", p.peers[4].err,
			 "bytes of TCP payload) did not come within 300 ms: packets of the interfaces' MTU "
			 "are lost on the way (a link, switch or bridge between with a smaller MTU)");
	}
	ck_probe_free(&p);
	pthread_join(gt, NULL);
	ck_listen_stop(&a);
	ck_listen_stop(&b);
	close(silent);
	close(greeter);
}

/* slurm.kill_wait: KillWait against --min-kill-wait, and what is said
 * when it was not read. */
static void test_kill_wait(void)
{
	struct ck_world *w = world(2, 1);

	ck_eval_setup(w);
	test_check("KillWait 30: OK, the seconds said", w, "slurm.kill_wait", CK_OK,
		   "KillWait=30: a task has 30 s from SIGTERM to SIGKILL (scancel, requeue, preemption, time "
		   "limit) to stop and write its checkpoint");
	w->slurm.kill_wait = 10;
	reeval(w);
	test_check("KillWait at --min-kill-wait: OK", w, "slurm.kill_wait", CK_OK, "KillWait=10:");
	w->slurm.kill_wait = 2;
	reeval(w);
	test_check("KillWait under it: WARN naming both and the fix", w, "slurm.kill_wait", CK_WARN,
		   "KillWait=2: a task has 2 s from SIGTERM to SIGKILL (scancel, requeue, preemption, time "
		   "limit), less than --min-kill-wait 10: a trainer that stops to write its checkpoint");
	test_check("... and the signal ahead of the time limit", w, "slurm.kill_wait", CK_WARN,
		   "raise KillWait in slurm.conf (Slurm's default is 30); for the time limit, a job can also "
		   "ask for a signal ahead of it (srun --signal=USR1@120)");
	test_cond("a WARN exits 0", ck_exit_code(w) == 0);
	w->opts.min_kill_wait = 0;
	w->slurm.kill_wait = 0;
	reeval(w);
	test_check("--min-kill-wait 0 warns of nothing", w, "slurm.kill_wait", CK_OK, "KillWait=0:");
	w->slurm = (struct ck_slurm){ .have = 0 };
	snprintf(w->slurm.err, sizeof(w->slurm.err), "not a Slurm job (no SLURM_JOB_ID)");
	reeval(w);
	test_check("not read: SKIP with why", w, "slurm.kill_wait", CK_SKIP,
		   "KillWait not read: not a Slurm job (no SLURM_JOB_ID)");
	test_cond("collectives still may run", ck_coll_safe(w, (char[CK_MSG]){ 0 }, CK_MSG));
	drop(w);

	struct ck_slurm s;
	ck_slurm_parse("kill_wait 45\n", 0, &s);
	test_cond("parse: KillWait", s.have && s.kill_wait == 45);
	ck_slurm_parse("test_check: error: Parsing error at unrecognized key: BogusKey\n"
		       "test_check: fatal: Unable to process configuration file\n", 1 << 8, &s);
	test_cond("parse: libslurm's fatal, not read", !s.have);
	test_streq("parse: libslurm's words, without the program's name", s.err,
		   "libslurm: error: Parsing error at unrecognized key: BogusKey; fatal: Unable to process "
		   "configuration file");
	ck_slurm_parse("error slurm_load_ctl_conf: Protocol authentication error\n"
		       "ddp-check: error: Munge encode failed: Failed to access \"/run/munge/munge.sock\": "
		       "Permission denied\n"
		       "ddp-check: error: slurm_send_node_msg: auth_g_create: REQUEST_BUILD_INFO has "
		       "authentication error\n", 1 << 8, &s);
	test_streq("parse: the failed call, then libslurm's reasons", s.err,
		   "slurm_load_ctl_conf: Protocol authentication error (libslurm: error: Munge encode failed: "
		   "Failed to access \"/run/munge/munge.sock\": Permission denied; error: slurm_send_node_msg: "
		   "auth_g_create: REQUEST_BUILD_INFO has authentication error)");
	ck_slurm_parse("x: error: retrying\nx: error: retrying\nx: error: retrying\n", 1 << 8, &s);
	test_streq("parse: a line repeated once", s.err, "libslurm: error: retrying");
	ck_slurm_parse("error slurm_load_ctl_conf: Unable to contact slurm controller (connect failure)\n",
		       1 << 8, &s);
	test_streq("parse: the failed call and its error", s.err,
		   "slurm_load_ctl_conf: Unable to contact slurm controller (connect failure)");
	ck_slurm_parse("", 9, &s);
	test_streq("parse: a child killed", s.err, "the query of the controller died by signal 9");
	ck_slurm_parse("", 3 << 8, &s);
	test_streq("parse: a child that said nothing", s.err,
		   "the query of the controller ended with status 3 and no answer");
	ck_slurm_parse("kill_wait 99999\n", 0, &s);
	test_cond("parse: an impossible KillWait is no answer", !s.have);
}

/* The query itself: a child running libslurm against slurm.conf files made
 * here, none with a controller that answers. */
static void test_slurm_query(void)
{
	struct ck_slurm_query q;
	struct ck_slurm s;
	char dir[] = "/tmp/test_check_slurm.XXXXXX", bad[64], none[64], gone[80];
	const char *old = getenv("SLURM_CONF");
	char *saved = old ? strdup(old) : NULL;

	ck_slurm_ask(&q, NULL);
	ck_slurm_answer(&q, 0, &s);
	test_cond("no job: nothing asked", !s.have && q.pid == 0);
	test_streq("no job: said so", s.err, "not a Slurm job (no SLURM_JOB_ID)");

	test_cond("a temporary directory", mkdtemp(dir) != NULL);
	snprintf(bad, sizeof(bad), "%s/bad.conf", dir);
	snprintf(none, sizeof(none), "%s/none.conf", dir);
	snprintf(gone, sizeof(gone), "%s/missing/slurm.conf", dir);
	FILE *f = fopen(bad, "w");
	if (f) {
		fputs("ClusterName=t\nSlurmctldHost=localhost\nBogusKey=1\n", f);
		fclose(f);
	}
	/* port 1 of loopback: refused at once */
	f = fopen(none, "w");
	if (f) {
		fputs("ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=2\n", f);
		fclose(f);
	}

	setenv("SLURM_CONF", bad, 1);
	ck_slurm_ask(&q, "12");
	ck_slurm_answer(&q, q.started + 20, &s);
	test_cond("a slurm.conf libslurm cannot read: not read", !s.have);
	test_err("... libslurm's fatal() quoted, ddp-check alive", s.err,
		 "; fatal: Unable to process configuration file");

	setenv("SLURM_CONF", none, 1);
	ck_slurm_ask(&q, "12");
	ck_slurm_answer(&q, q.started + 20, &s);
	test_streq("no controller: the call and libslurm's error", s.err,
		   "slurm_load_ctl_conf: Unable to contact slurm controller (connect failure)");

	/* libslurm would retry a missing file for 60 s: not asked */
	setenv("SLURM_CONF", gone, 1);
	ck_slurm_ask(&q, "12");
	ck_slurm_answer(&q, q.started + 20, &s);
	test_cond("a missing SLURM_CONF: no child", !s.have && q.pid == 0);
	test_err("... the variable and why", s.err, "SLURM_CONF=");
	test_err("... the file", s.err, "/missing/slurm.conf: No such file or directory");

	/* a controller that takes the connection and never answers (a listen
	 * queue nobody accepts from; auth/none: no munged here): libslurm waits
	 * its MessageTimeout, 10 s; the bound kills the child at 1 s */
	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in la = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t ll = sizeof(la);
	test_cond("a silent listener", lfd >= 0 && bind(lfd, (struct sockaddr *)&la, sizeof(la)) == 0 &&
		  listen(lfd, 8) == 0 && getsockname(lfd, (struct sockaddr *)&la, &ll) == 0);
	f = fopen(none, "w");
	if (f) {
		fprintf(f, "ClusterName=t\nSlurmctldHost=localhost\nSlurmctldPort=%d\nMessageTimeout=10\n"
			"AuthType=auth/none\n", ntohs(la.sin_port));
		fclose(f);
	}
	setenv("SLURM_CONF", none, 1);
	ck_slurm_ask(&q, "12");
	double t0 = q.started;
	ck_slurm_answer(&q, q.started + 1, &s);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	double took = (double)ts.tv_sec + ts.tv_nsec * 1e-9 - t0;
	test_cond("a query past its bound is killed at it", took < 3 && q.pid == 0 && !s.have);
	test_streq("... and named so", s.err, "no answer from the controller within 1 s");
	if (took >= 3)
		printf("#   took %.1f s\n", took);
	close(lfd);

	if (saved)
		setenv("SLURM_CONF", saved, 1);
	else
		unsetenv("SLURM_CONF");
	free(saved);
	unlink(bad);
	unlink(none);
	rmdir(dir);
}

/* ---- sysfs: PCIe links and RDMA ports (hw.c) ---------------------------- */

static void put_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* bus/pci/devices/BUSID with its link's four files */
static void fake_pci(const char *root, const char *busid, const char *cur, int cw, const char *max, int mw)
{
	char dir[512], w[16];
	snprintf(dir, sizeof(dir), "%s/bus/pci/devices/%s", root, busid);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
	if (system(cmd) != 0)
		return;
	put_file(dir, "current_link_speed", cur);
	put_file(dir, "max_link_speed", max);
	snprintf(w, sizeof(w), "%d\n", cw);
	put_file(dir, "current_link_width", w);
	snprintf(w, sizeof(w), "%d\n", mw);
	put_file(dir, "max_link_width", w);
}

/* class/infiniband/DEV (its device link to BUSID) with port 1 */
static void fake_hca(const char *root, const char *dev, const char *busid, const char *state, const char *rate)
{
	char dir[512], cmd[700], link[600], target[300];
	snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/1", root, dev);
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
	if (system(cmd) != 0)
		return;
	put_file(dir, "state", state);
	put_file(dir, "rate", rate);
	put_file(dir, "link_layer", "InfiniBand\n");
	snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", root, dev);
	snprintf(target, sizeof(target), "../../../bus/pci/devices/%s", busid);
	if (symlink(target, link) != 0)
		perror(link);
}

static void test_hw_sysfs(void)
{
	char root[] = "/tmp/ddp-check-sysfs.XXXXXX";
	if (!mkdtemp(root)) {
		test_cond("a temporary sysfs tree", 0);
		return;
	}
	struct ck_link l;
	fake_pci(root, "0000:1b:00.0", "16.0 GT/s PCIe\n", 8, "32.0 GT/s PCIe\n", 16);
	ck_link_read(root, "gpu", "0000:1b:00.0", &l);
	test_cond("a GPU's link: its speeds as sysfs says them, its widths",
		  !l.err[0] && !strcmp(l.cur_speed, "16.0 GT/s PCIe") && !strcmp(l.max_speed, "32.0 GT/s PCIe") &&
		  l.cur_width == 8 && l.max_width == 16);
	test_cond("... the GT/s of a speed", ck_link_gts(l.cur_speed) == 16.0);
	char enc[512];
	struct ck_link back;
	ck_link_encode(&l, enc, sizeof(enc));
	ck_link_decode(enc, &back);
	test_cond("... through a record and back", !memcmp(&l, &back, sizeof(l)));
	ck_link_read(root, "gpu", "0000:99:00.0", &l);
	test_cond("a bus id sysfs does not have: said, not fatal", strstr(l.err, "no PCI device 0000:99:00.0") != NULL);

	fake_pci(root, "0000:3d:00.0", "16.0 GT/s PCIe\n", 16, "16.0 GT/s PCIe\n", 16);
	fake_hca(root, "mlx5_0", "0000:3d:00.0", "4: ACTIVE\n", "200 Gb/sec (4X HDR)\n");
	fake_hca(root, "mlx5_1", "0000:3d:00.0", "1: DOWN\n", "10 Gb/sec (4X SDR)\n");
	ck_nic_link_read(root, "mlx5_0", &l);
	test_cond("an RDMA device's link, through its device link", !l.err[0] && !strcmp(l.busid, "0000:3d:00.0") &&
		  l.cur_width == 16);
	ck_nic_link_read(root, "eth9", &l);
	test_cond("a NIC that is not there: said", strstr(l.err, "eth9 is neither an RDMA device nor a network interface") != NULL);
	char ports[512];
	ck_ib_ports(root, ports, sizeof(ports));
	test_cond("the ports, each with its state, rate and link layer",
		  strstr(ports, "mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand") &&
		  strstr(ports, "mlx5_1/1:DOWN:10 Gb/sec (4X SDR):InfiniBand"));
	char small[40];
	ck_ib_ports(root, small, sizeof(small));
	test_cond("... whole ports only where the room ends", strlen(small) < sizeof(small) && !strchr(small, ';'));
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", root);
}

static void set_link(struct ck_link *l, const char *name, const char *busid, const char *cur, int cw,
		     const char *max, int mw)
{
	memset(l, 0, sizeof(*l));
	snprintf(l->name, sizeof(l->name), "%s", name);
	snprintf(l->busid, sizeof(l->busid), "%s", busid);
	snprintf(l->cur_speed, sizeof(l->cur_speed), "%s", cur);
	snprintf(l->max_speed, sizeof(l->max_speed), "%s", max);
	l->cur_width = cw;
	l->max_width = mw;
}

static void set_env(struct ck_rank *r, enum ck_env k, const char *v)
{
	snprintf(r->env[k], sizeof(r->env[k]), "%s", v);
	r->have |= 1u << k;
}

static void test_pcie(void)
{
	struct ck_world *w = world(2, 2);
	ck_eval_setup(w);
	test_check("a CPU step: nothing to check", w, "hw.pcie", CK_OK, "no GPU, and no NIC named (DDP_NIC)");
	drop(w);

	w = world(2, 2);
	with_gpus(w, 2);
	for (int i = 0; i < 4; i++)
		set_link(&w->ranks[i].gpu_link, "gpu", w->ranks[i].gpu, "32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16);
	ck_eval_setup(w);
	test_check("four GPUs at full width and speed: OK, each link counted once", w, "hw.pcie", CK_OK,
		   "4 PCIe links of the step's GPUs and NICs at full width");
	set_link(&w->ranks[3].gpu_link, "gpu", w->ranks[3].gpu, "16.0 GT/s PCIe", 8, "32.0 GT/s PCIe", 16);
	reeval(w);
	test_check("a GPU at x8 of x16: FAIL naming node, bus id and the cut", w, "hw.pcie", CK_FAIL,
		   "gpu02: GPU 0000:43:00.0 at x8 of x16 (16.0 GT/s PCIe of 32.0 GT/s PCIe): a degraded link, its "
		   "bandwidth to the host cut to 50%");
	set_link(&w->ranks[3].gpu_link, "gpu", w->ranks[3].gpu, "2.5 GT/s PCIe", 16, "32.0 GT/s PCIe", 16);
	reeval(w);
	test_check("a GPU at full width, low speed: OK, said as idle power saving", w, "hw.pcie", CK_OK,
		   "GPUs lower their link speed while idle: gpu02's GPU 0000:43:00.0 at 2.5 GT/s PCIe of 32.0 GT/s PCIe");
	for (int i = 0; i < 4; i++) {
		set_env(&w->ranks[i], CK_NIC, "mlx5_0");
		set_link(&w->ranks[i].nic_link, "mlx5_0", "0000:3d:00.0", "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16);
	}
	set_link(&w->ranks[0].nic_link, "mlx5_0", "0000:3d:00.0", "8.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16);
	reeval(w);
	test_check("a NIC trained below its speed: WARN naming it", w, "hw.pcie", CK_WARN,
		   "gpu01: NIC mlx5_0 0000:3d:00.0 trained at 8.0 GT/s PCIe of 16.0 GT/s PCIe (x16)");
	snprintf(w->ranks[2].gpu_link.err, sizeof(w->ranks[2].gpu_link.err), "0000:1b:00.0 has no PCIe link speed");
	w->ranks[0].nic_link.cur_speed[0] = '1';
	snprintf(w->ranks[0].nic_link.cur_speed, sizeof(w->ranks[0].nic_link.cur_speed), "16.0 GT/s PCIe");
	reeval(w);
	test_check("a link sysfs did not show: said beside the others", w, "hw.pcie", CK_OK,
		   "not read: gpu02 GPU: 0000:1b:00.0 has no PCIe link speed");
	drop(w);
}

/* hw.h2d: each task's copies to its GPU against its link (eval_h2d.c). */
static void test_h2d(void)
{
	test_cond("a link's GB/s each way: Gen1 x1 0.25, Gen3 x16 15.75, Gen4 x16 31.5, Gen5 x16 63.0, "
		  "Gen6 x16 121.0, unknown 0",
		  ck_pcie_gbps(2.5, 1) == 0.25 && ck_pcie_gbps(8, 16) > 15.75 && ck_pcie_gbps(8, 16) < 15.76 &&
		  ck_pcie_gbps(16, 16) > 31.50 && ck_pcie_gbps(16, 16) < 31.51 && ck_pcie_gbps(32, 16) > 63.0 &&
		  ck_pcie_gbps(32, 16) < 63.1 && ck_pcie_gbps(64, 16) == 121.0 && ck_pcie_gbps(0, 16) == 0 &&
		  ck_pcie_gbps(16, 0) == 0);
	struct ck_world *w = world(2, 2);
	ck_eval_setup(w);
	test_check("a CPU step: nothing to copy to", w, "hw.h2d", CK_OK, "no task has a GPU");
	drop(w);

	w = world(2, 2);
	with_gpus(w, 2);
	for (int i = 0; i < 4; i++) {
		w->ranks[i].h2d_gbps = 25 + i;
		set_link(&w->ranks[i].h2d_link, "gpu", w->ranks[i].gpu, "16.0 GT/s PCIe", 16, "16.0 GT/s PCIe", 16);
	}
	ck_eval_setup(w);
	test_check("four GPUs near their Gen4 x16 links: OK with the range and the least share", w, "hw.h2d",
		   CK_OK, "host-to-device 25.0..28.0 GB/s on 4 GPUs; the least 79% of its PCIe link (task 0, gpu01: "
		   "16.0 GT/s PCIe x16)");
	w->ranks[3].h2d_gbps = 9.5;
	reeval(w);
	test_check("one at 30% of its link: FAIL naming task, node, GPU, the figure and the link", w, "hw.h2d",
		   CK_FAIL, "task 3 (gpu02): GPU 0000:43:00.0: host-to-device 9.5 GB/s, 30% of its link's 31.5 GB/s "
		   "(16.0 GT/s PCIe x16; --min-h2d 50%): a slow path to the GPU");
	w->opts.min_h2d = 25;
	reeval(w);
	test_check("... OK under --min-h2d 25", w, "hw.h2d", CK_OK, "the least 30% of its PCIe link (task 3");
	w->opts.min_h2d = 50;
	/* a link sysfs did not show: the step's median instead */
	snprintf(w->ranks[3].h2d_link.err, sizeof(w->ranks[3].h2d_link.err), "no PCIe link speed");
	reeval(w);
	test_check("a slow GPU whose link was not read: WARN against the step's median", w, "hw.h2d", CK_WARN,
		   "task 3 (gpu02): GPU 0000:43:00.0: host-to-device 9.5 GB/s, 37% of the step's median 25.5 GB/s "
		   "(its PCIe link not read: no PCIe link speed)");
	w->ranks[3].h2d_gbps = 26;
	reeval(w);
	test_check("... and one near the median OK", w, "hw.h2d", CK_OK, "host-to-device 25.0..27.0 GB/s on 4 GPUs");
	for (int i = 0; i < 4; i++) {
		w->ranks[i].h2d_gbps = 0;
		snprintf(w->ranks[i].h2d_err, sizeof(w->ranks[i].h2d_err), "the CUDA runtime: none of libcudart.so "
			 "could be loaded");
	}
	w->ranks[2].proto = 6;
	w->ranks[2].h2d_err[0] = 0;
	reeval(w);
	test_check("none measured: SKIP with each task's reason, an older ddp-check's named", w, "hw.h2d", CK_SKIP,
		   "not measured on any of 4 GPUs: task 0 (gpu01): the CUDA runtime: none of libcudart.so could be "
		   "loaded; task 1 (gpu01): the CUDA runtime");
	test_check("... the older one", w, "hw.h2d", CK_SKIP,
		   "task 2 (gpu02): its ddp-check (record 6) does not measure it");
	w->opts.h2d_bytes = 0;
	reeval(w);
	test_check("--h2d-bytes 0: SKIP", w, "hw.h2d", CK_SKIP, "--h2d-bytes 0: not measured");
	drop(w);

	/* the record carries them */
	struct ck_rank r = { .id = 1, .h2d_gbps = 12.5 }, back;
	char buf[16384];
	snprintf(r.host, sizeof(r.host), "gpu01");
	snprintf(r.h2d_err, sizeof(r.h2d_err), "why");
	set_link(&r.h2d_link, "gpu", "0000:1b:00.0", "32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16);
	int len = ck_rank_encode(&r, buf, sizeof(buf));
	test_cond("the host-to-device figure, its error and its link round-trip in the record",
		  len > 0 && ck_rank_decode(&back, buf, (size_t)len) == 0 && back.h2d_gbps == 12.5 &&
		  !strcmp(back.h2d_err, "why") && back.h2d_link.cur_width == 16 &&
		  !strcmp(back.h2d_link.cur_speed, "32.0 GT/s PCIe"));
}

/* A node's GPU pairs as its first task timed them: n GPUs, each pair at g
 * GB/s but from -> to at slow. */
static void p2p_matrix(struct ck_rank *r, int n, double g, int from, int to, double slow)
{
	memset(&r->p2p, 0, sizeof(r->p2p));
	r->p2p.n = n;
	for (int x = 0; x < n; x++) {
		snprintf(r->p2p.bus[x], sizeof(r->p2p.bus[x]), "0000:%02x:00.0", 0x1b + x);
		for (int y = 0; y < n; y++)
			r->p2p.gbps[x * n + y] = x == y ? 0 : (float)(x == from && y == to ? slow : g);
	}
}

/* gpu.p2p_bw: each node's GPU pairs against its best (eval_p2p_bw.c). */
static void test_p2p_bw(void)
{
	struct ck_world *w = world(2, 2);
	ck_eval_setup(w);
	test_check("a CPU step: nothing to time", w, "gpu.p2p_bw", CK_OK, "no GPUs in this step");
	drop(w);

	w = world(2, 2);
	with_gpus(w, 2);
	ck_eval_setup(w);
	test_check("GPUs, but no first task saw two: OK, said", w, "gpu.p2p_bw", CK_OK,
		   "no node's first task sees two GPUs: no pair to time");
	p2p_matrix(&w->ranks[0], 4, 180, -1, -1, 0);
	p2p_matrix(&w->ranks[2], 4, 175, -1, -1, 0);
	reeval(w);
	test_check("two nodes of 4 GPUs, every pair near the best: OK with the range", w, "gpu.p2p_bw", CK_OK,
		   "24 GPU pairs on 2 nodes at 175.0..180.0 GB/s each way (67108864 bytes a copy, the best of 3)");
	p2p_matrix(&w->ranks[2], 4, 175, 1, 3, 21.5);
	reeval(w);
	test_check("one pair at 12% of its node's best (through the host): FAIL naming node, both GPUs and the figures",
		   w, "gpu.p2p_bw", CK_FAIL, "gpu02: GPU 0000:1c:00.0 -> GPU 0000:1e:00.0 21.5 GB/s, 12% of the "
		   "node's best pair (175.0 GB/s; --min-p2p 50%)");
	w->opts.min_p2p = 10;
	reeval(w);
	test_check("... OK under --min-p2p 10", w, "gpu.p2p_bw", CK_OK, "at 21.5..180.0 GB/s");
	w->opts.min_p2p = 50;
	memset(&w->ranks[0].p2p, 0, sizeof(w->ranks[0].p2p));
	snprintf(w->ranks[0].p2p.err, sizeof(w->ranks[0].p2p.err), "CUDA device 1: out of memory");
	p2p_matrix(&w->ranks[2], 4, 175, -1, -1, 0);
	reeval(w);
	test_check("a node that could not time them: said beside the others", w, "gpu.p2p_bw", CK_OK,
		   "12 GPU pairs on 1 node at 175.0..175.0 GB/s each way (67108864 bytes a copy, the best of 3); "
		   "not measured: gpu01 (task 0): CUDA device 1: out of memory");
	memset(&w->ranks[2].p2p, 0, sizeof(w->ranks[2].p2p));
	reeval(w);
	test_check("none timed: SKIP with the reasons", w, "gpu.p2p_bw", CK_SKIP,
		   "not measured: gpu01 (task 0): CUDA device 1: out of memory");
	w->opts.p2p_bytes = 0;
	reeval(w);
	test_check("--p2p-bytes 0: SKIP", w, "gpu.p2p_bw", CK_SKIP, "--p2p-bytes 0: not measured");
	w->opts.p2p_bytes = 64u << 20;
	p2p_matrix(&w->ranks[2], 2, 50, 0, 1, 49);
	w->coll_ran = 0;
	FILE *f = tmpfile();
	ck_report_text(w, f);
	rewind(f);
	char text[16384];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	test_err("the report's matrix: its header", text, "\n# GPU copies on gpu02, 67108864 bytes each, the best "
		 "of 3 (GB/s, from the row's GPU to the column's)\n#               0000:1b:00.0  0000:1c:00.0\n");
	test_err("... its rows", text, "\n  0000:1b:00.0             -         49.00\n  0000:1c:00.0         50.00"
		 "             -\n");
	f = tmpfile();
	ck_report_json(w, f);
	rewind(f);
	n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = 0;
	fclose(f);
	test_err("... and in JSON", text, "\"gpu_pairs\": [\n    {\"node\": \"gpu02\", \"from\": \"0000:1b:00.0\", "
		 "\"to\": \"0000:1c:00.0\", \"gbps\": 49.0000},");

	/* the record carries them */
	char buf[16384];
	struct ck_rank back;
	int len = ck_rank_encode(&w->ranks[2], buf, sizeof(buf));
	test_cond("the GPU pairs round-trip in the record", len > 0 &&
		  ck_rank_decode(&back, buf, (size_t)len) == 0 && back.p2p.n == 2 &&
		  !strcmp(back.p2p.bus[1], "0000:1c:00.0") && back.p2p.gbps[1] == 49 && back.p2p.gbps[2] == 50);
	drop(w);
}

static void ports(struct ck_rank *r, const char *s)
{
	snprintf(r->ibports, sizeof(r->ibports), "%s", s);
	snprintf(r->rdma, sizeof(r->rdma), "mlx5_0,mlx5_1");
}

static void test_fabric(void)
{
	struct ck_world *w = world(3, 1);
	w->backend = "nccl";
	ck_eval_setup(w);
	test_check("no RDMA port anywhere: OK, sockets", w, "net.fabric", CK_OK,
		   "no InfiniBand or RoCE port in use");
	for (int i = 0; i < 3; i++)
		ports(&w->ranks[i], "mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand;mlx5_1/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand");
	reeval(w);
	test_check("every port active at one rate: OK", w, "net.fabric", CK_OK,
		   "6 RDMA ports active on 3 nodes, at 200 Gb/sec (4X HDR)");
	ports(&w->ranks[1], "mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand;mlx5_1/1:DOWN:10 Gb/sec (4X SDR):InfiniBand");
	reeval(w);
	test_check("a port down under NCCL: FAIL naming node, device and state", w, "net.fabric", CK_FAIL,
		   "gpu02: mlx5_1 port 1 is DOWN");
	w->backend = "gloo";
	reeval(w);
	test_check("... under gloo a warning, saying why", w, "net.fabric", CK_WARN,
		   "gpu02: mlx5_1 port 1 is DOWN (gloo runs over TCP; an NCCL step here would not)");
	w->backend = "nccl";
	for (int i = 0; i < 3; i++)
		set_env(&w->ranks[i], CK_NCCL_IB_HCA, "=mlx5_0");
	reeval(w);
	test_check("NCCL_IB_HCA=mlx5_0 leaves the port down alone: OK", w, "net.fabric", CK_OK,
		   "3 RDMA ports active on 3 nodes");
	for (int i = 0; i < 3; i++)
		set_env(&w->ranks[i], CK_NCCL_IB_HCA, "^mlx5_1");
	reeval(w);
	test_check("NCCL_IB_HCA=^mlx5_1 (excluded): OK", w, "net.fabric", CK_OK, "3 RDMA ports active");
	for (int i = 0; i < 3; i++)
		set_env(&w->ranks[i], CK_NCCL_IB_HCA, "mlx4");
	reeval(w);
	test_check("NCCL_IB_HCA naming devices that are not there: FAIL naming what is", w, "net.fabric",
		   CK_FAIL, "gpu01: NCCL_IB_HCA=mlx4 names no RDMA device there (it has mlx5_0,mlx5_1)");
	for (int i = 0; i < 3; i++) {
		w->ranks[i].have &= ~(1u << CK_NCCL_IB_HCA);
		ports(&w->ranks[i], "mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand");
	}
	ports(&w->ranks[2], "mlx5_0/1:ACTIVE:100 Gb/sec (4X EDR):InfiniBand");
	reeval(w);
	test_check("one node's ports at a lower rate: WARN naming it", w, "net.fabric", CK_WARN,
		   "gpu03's RDMA ports run at 100 Gb/sec (4X EDR) where other nodes' run at 200 Gb/sec (4X HDR)");
	ports(&w->ranks[2], "mlx5_0/1:ACTIVE:200 Gb/sec (4X HDR):InfiniBand");
	for (int i = 0; i < 3; i++)
		set_env(&w->ranks[i], CK_NIC, "mlx5_0");
	set_env(&w->ranks[1], CK_NIC, "mlx5_7");
	reeval(w);
	test_check("DDP_NIC naming no device: FAIL naming it", w, "net.fabric", CK_FAIL,
		   "gpu02: DDP_NIC=mlx5_7 names no RDMA device or interface there");
	set_env(&w->ranks[1], CK_NIC, "ens17");
	snprintf(w->ranks[1].ifs_here, sizeof(w->ranks[1].ifs_here), "lo, ens17");
	reeval(w);
	test_check("DDP_NIC naming an interface of the node: OK", w, "net.fabric", CK_OK, "3 RDMA ports active");
	for (int i = 0; i < 3; i++)
		set_env(&w->ranks[i], CK_NCCL_IB_DISABLE, "1");
	ports(&w->ranks[0], "mlx5_0/1:DOWN:200 Gb/sec (4X HDR):InfiniBand");
	reeval(w);
	test_check("NCCL_IB_DISABLE=1: the ports are not used", w, "net.fabric", CK_OK, "no InfiniBand or RoCE port in use");
	drop(w);
}

/* coll.baseline: the sweep against a recorded healthy run's report. */
static void write_baseline(const char *path, int world, int nodes, const char *backend, double busbw_last)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "{\n  \"version\": \"0.1.0\",\n  \"backend\": \"%s\",\n  \"world_size\": %d,\n  \"nodes\": %d,\n"
		"  \"bandwidth\": [\n    {\"size\": 8, \"count\": 2, \"busbw\": 0.0001},\n"
		"    {\"size\": 1024, \"count\": 256, \"type\": \"float\", \"busbw\": %.4f}\n  ]\n}\n",
		backend, world, nodes, busbw_last);
	fclose(f);
}

static void test_baseline(void)
{
	char dir[] = "/tmp/ddp-check-base.XXXXXX", path[64], bad[64];
	if (!mkdtemp(dir)) {
		test_cond("a temporary folder", 0);
		return;
	}
	snprintf(path, sizeof(path), "%s/base.json", dir);
	snprintf(bad, sizeof(bad), "%s/bad.json", dir);
	struct ck_world *w = world(3, 2);
	w->opts.min_baseline = 80;
	w->opts.baseline = path;
	w->nsizes = ck_sizes(&w->opts, w->sizes, CK_MAX_SIZES);
	ran(w, 1e-6);   /* 1024 bytes in 1 us over 6 tasks: busbw 1.024 * 10/6 GB/s */
	double bus = ck_busbw(1024 / 1e-6 / 1e9, 6);
	write_baseline(path, 6, 3, "gloo", bus);
	w->nres = 0;
	ck_eval_coll(w);
	test_check("as the baseline: OK, the least said", w, "coll.baseline", CK_OK,
		   "every one of 2 sizes at least 80% of");
	write_baseline(path, 6, 3, "gloo", bus * 2);
	w->nres = 0;
	ck_eval_coll(w);
	test_check("half the baseline's busbw: FAIL naming the size and both figures", w, "coll.baseline", CK_FAIL,
		   "1024 bytes: busbw 1.71 GB/s, 50% of the baseline's 3.41");
	w->opts.min_baseline = 40;
	w->nres = 0;
	ck_eval_coll(w);
	test_check("... within --min-baseline 40: OK", w, "coll.baseline", CK_OK, "the least 50%");
	write_baseline(path, 12, 2, "nccl", bus);
	w->nres = 0;
	ck_eval_coll(w);
	test_check("another shape: a warning, not judged", w, "coll.baseline", CK_WARN,
		   "was recorded at world size 12 on 2 nodes under nccl, this step is 6 on 3 under gloo");
	FILE *f = fopen(bad, "w");
	if (f) {
		fputs("{\"backend\": \"gloo\", \"world_size\": 6, \"bandwidth\": [ {\"size\": 8} ]}\n", f);
		fclose(f);
	}
	w->opts.baseline = bad;
	w->nres = 0;
	ck_eval_coll(w);
	test_check("a table without busbw: FAIL saying what was expected", w, "coll.baseline", CK_FAIL,
		   "expected a ddp-check --json report (world_size, backend and a bandwidth table of size and busbw)");
	w->opts.baseline = "/nonexistent/base.json";
	w->nres = 0;
	ck_eval_coll(w);
	test_check("a baseline that cannot be read: FAIL naming it", w, "coll.baseline", CK_FAIL,
		   "--baseline /nonexistent/base.json: cannot read it");
	w->opts.baseline = path;
	w->coll_ran = 0;
	snprintf(w->coll_skip, sizeof(w->coll_skip), "not run: net.probe failed");
	w->nres = 0;
	ck_eval_coll(w);
	test_check("no collectives: SKIP with why", w, "coll.baseline", CK_SKIP, "not run: net.probe failed");
	drop(w);
	char cmd[96];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		printf("# could not remove %s\n", dir);
}

/* The other collectives on every task: each size in t seconds, wrong
 * elements nowhere but where said. */
static void ops_ran(struct ck_world *w, double t)
{
	for (int i = 0; i < w->n; i++) {
		struct ck_coll *c = &w->colls[i];
		c->ops_ran = 1;
		for (int op = 0; op < CK_NOPS; op++) {
			c->nop_times[op] = w->nsizes;
			for (size_t k = 0; k < w->nsizes; k++)
				c->op_times[op][k] = t;
		}
	}
}

static void test_ops(void)
{
	struct ck_world *w = world(3, 2);
	w->nsizes = ck_sizes(&w->opts, w->sizes, CK_MAX_SIZES); /* 8 .. 1024 bytes */
	ran(w, 1e-5);
	ops_ran(w, 1e-6);
	ck_eval_ops(w);
	/* 1024 bytes is 42 floats a task: 1008 bytes move in 1 us; busbw 1.008 * 5/6 */
	test_check("all_gather: exact, busbw at the largest size that holds a float a task", w, "coll.all_gather",
		   CK_OK, "all_gather exact at every size on all 6 tasks; busbw 0.84 GB/s at 1008 bytes");
	test_check("reduce_scatter the same", w, "coll.reduce_scatter", CK_OK, "reduce_scatter exact");
	test_check("alltoall the same", w, "coll.alltoall", CK_OK, "alltoall exact");
	test_cond("a sweep size below a float per task moves nothing", ck_op_count(16, 6) == 0 &&
									ck_op_count(1024, 6) == 42);
	test_cond("the slowest task's time", (w->colls[4].op_times[CK_ALLTOALL][3] = 5e-6,
					     ck_op_time_max(w, CK_ALLTOALL, 3) == 5e-6));
	w->colls[3].op_wrong[CK_REDUCE_SCATTER][5] = 3;
	w->nres = 0;
	ck_eval_ops(w);
	test_check("wrong elements: FAIL naming the task, its node, the count and the size", w,
		   "coll.reduce_scatter", CK_FAIL, "WRONG data: task 3 (gpu02): 3 of 10 elements wrong at 240 bytes");
	test_cond("... counted in the table's #wrong", ck_op_wrong(w, CK_REDUCE_SCATTER, 5) == 3);
	test_check("... the others still OK", w, "coll.all_gather", CK_OK, "exact");
	snprintf(w->colls[5].op_msg, sizeof(w->colls[5].op_msg), "all_gather of 1008 bytes failed: gloo: timed out");
	w->nres = 0;
	ck_eval_ops(w);
	test_check("a task whose run failed: FAIL with its message", w, "coll.alltoall", CK_FAIL,
		   "task 5 (gpu03): all_gather of 1008 bytes failed");
	w->backend = "nccl";
	w->nres = 0;
	ck_eval_ops(w);
	test_check("under NCCL: judged as under gloo", w, "coll.alltoall", CK_FAIL,
		   "task 5 (gpu03): all_gather of 1008 bytes failed");
	for (int i = 0; i < w->n; i++) {
		w->colls[i].ops_ran = 0;
		w->colls[i].op_msg[0] = 0;
	}
	w->nres = 0;
	ck_eval_ops(w);
	test_check("under NCCL, tasks that ran none (an older ddp-check's): skipped, saying so", w,
		   "coll.all_gather", CK_SKIP, "no task ran them (coll.allreduce; under NCCL, a ddp-check older");
	w->backend = "gloo";
	w->coll_ran = 0;
	snprintf(w->coll_skip, sizeof(w->coll_skip), "task 2 never joined");
	w->nres = 0;
	ck_eval_ops(w);
	test_check("no collectives: skipped with their reason", w, "coll.alltoall", CK_SKIP, "task 2 never joined");

	/* the record carries them */
	char buf[16384];
	struct ck_coll back;
	w->colls[0].npairs = 2;
	w->colls[0].pairs[0] = (struct ck_pair){ 2, 1.25 };
	w->colls[0].pairs[1] = (struct ck_pair){ 4, 0.125 };
	w->colls[0].pairs_ran = 1;
	w->colls[0].ops_ran = 1;
	w->colls[0].op_wrong[CK_ALLGATHER][2] = 7;
	int len = ck_coll_encode(&w->colls[0], buf, sizeof(buf));
	test_cond("the collectives' record encodes", len > 0);
	ck_coll_decode(&back, buf, len > 0 ? (size_t)len : 0);
	test_cond("... and decodes: times, #wrong, pairs", back.ops_ran == 1 &&
		  back.nop_times[CK_ALLTOALL] == w->nsizes && back.op_times[CK_REDUCE_SCATTER][1] == 1e-6 &&
		  back.op_wrong[CK_ALLGATHER][2] == 7 && back.npairs == 2 && back.pairs[1].peer == 4 &&
		  back.pairs[1].gbps == 0.125 && back.pairs_ran == 1);
	drop(w);
}

/* Pairs timed by each node's first task (tasks 0, 2, 4, ... with 2 a node):
 * gbps[a][b] for nodes a < b. */
static void pairs_ran(struct ck_world *w, int nodes, int per, double g[][6])
{
	w->coll_ran = 1;
	for (int a = 0; a < nodes; a++) {
		struct ck_coll *c = &w->colls[a * per];
		c->have = 1;
		c->pairs_ran = 1;
		c->npairs = 0;
		for (int b = 0; b < nodes; b++)
			if (b != a)
				c->pairs[c->npairs++] = (struct ck_pair){ b * per, a < b ? g[a][b] : g[b][a] };
	}
	for (int i = 0; i < w->n; i++)
		w->colls[i].have = 1;
}

static void test_pairs(void)
{
	struct ck_world *w = world(4, 2);
	double g[6][6] = { { 0 } };
	w->opts.pair_bytes = 1 << 20;
	w->opts.min_pair = 50;
	for (int a = 0; a < 4; a++)
		for (int b = a + 1; b < 4; b++)
			g[a][b] = 2.0 + 0.1 * (a + b);
	pairs_ran(w, 4, 2, g);
	ck_eval_pairs(w);
	test_check("healthy pairs: OK with the range", w, "net.pairs", CK_OK,
		   "6 node pairs of 4 nodes: 2.10..2.50 GB/s each way");
	struct ck_pair_row rows[16];
	test_cond("six rows, each pair once", ck_pair_rows(w, rows, 16) == 6 && rows[0].a == 0 && rows[0].b == 2);
	/* node 3 (gpu03, task 4) slow toward everyone */
	g[0][2] = 0.02, g[1][2] = 0.03, g[2][3] = 0.025;
	pairs_ran(w, 4, 2, g);
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("one node slow in all its pairs: FAIL naming it", w, "net.pairs", CK_FAIL,
		   "node gpu03 is slow: its 3 pairs at 0.020..0.030 GB/s each way, the other pairs at 2.10..2.40");
	const struct ck_result *r = res(w, "net.pairs");
	test_cond("... and no link named beside it", r && !strstr(r->msg, "the link"));
	/* one side measured lower: the lower counts */
	w->colls[4].pairs[0].gbps = 0.01;
	test_cond("both sides' figures: the lower", ck_pair_rows(w, rows, 16) == 6 && rows[1].gbps == 0.01);
	/* a slow link between healthy nodes */
	for (int a = 0; a < 4; a++)
		for (int b = a + 1; b < 4; b++)
			g[a][b] = 2.0;
	g[0][1] = 0.5;
	pairs_ran(w, 4, 2, g);
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("one slow link: FAIL naming both ends", w, "net.pairs", CK_FAIL,
		   "the link gpu01-gpu02 at 0.500 GB/s each way, 25% of the best pair's 2.00");
	w->opts.min_pair = 20;
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("... within --min-pair 20: OK", w, "net.pairs", CK_OK, "0.50..2.00 GB/s");
	drop(w);

	w = world(2, 1);
	w->opts.pair_bytes = 1 << 20;
	w->opts.min_pair = 50;
	g[0][1] = 0.01;
	pairs_ran(w, 2, 1, g);
	ck_eval_pairs(w);
	test_check("two nodes: the one pair said, not judged", w, "net.pairs", CK_OK,
		   "1 node pair (gpu01-gpu02): 0.01 GB/s each way (with two nodes a slow node and a slow link look alike");
	w->colls[1].npairs = 0;
	w->colls[0].npairs = 0;
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("no pair timed: skipped", w, "net.pairs", CK_SKIP, "no pair timed");
	snprintf(w->colls[1].pair_msg, sizeof(w->colls[1].pair_msg), "node pairs: gloo: timed out");
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("a task's exchange failed: FAIL with it", w, "net.pairs", CK_FAIL,
		   "task 1 (gpu02): node pairs: gloo: timed out");
	w->backend = "nccl";
	w->nres = 0;
	ck_eval_pairs(w);
	test_check("under NCCL: judged as under gloo", w, "net.pairs", CK_FAIL,
		   "task 1 (gpu02): node pairs: gloo: timed out");
	drop(w);

	w = world(1, 2);
	w->opts.pair_bytes = 1 << 20;
	w->coll_ran = 1;
	ck_eval_pairs(w);
	test_check("one node: skipped", w, "net.pairs", CK_SKIP, "one node: no link between nodes to time");
	drop(w);
}

/* The kernel's Xid lines for one GPU (gpu.c), from a file of /dev/kmsg's
 * records and dmesg's lines. */
static void test_xids(void)
{
	char path[] = "/tmp/ddp-check-kmsg.XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	struct ck_gpu_health g;

	if (!f) {
		test_cond("a temporary file", 0);
		return;
	}
	fprintf(f, "6,100,200,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception\n");
	fprintf(f, "[ 12.5] NVRM: Xid (PCI:0000:3B:00): 79, pid=2, GPU has fallen off the bus.\n");
	fprintf(f, "6,101,201,-;NVRM: Xid (PCI:0000:86:00): 48, pid=3, DBE\n");
	fprintf(f, "6,102,202,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n");
	for (int i = 0; i < 20; i++)
		fprintf(f, "6,%d,1,-;NVRM: Xid (PCI:00000000:3b:00): %d, pid=9\n", 200 + i, 31 + i);
	fclose(f);
	memset(&g, 0, sizeof(g));
	ck_gpu_xids(path, "00000000:3B:00.0", &g);
	test_cond("Xids: this GPU's lines only, any case and domain width", g.nxid == 22 && !g.xid_err[0]);
	test_streq("... the last 16 codes kept", g.xids, "35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50");
	memset(&g, 0, sizeof(g));
	ck_gpu_xids(path, "0000:86:00.0", &g);
	test_cond("another GPU: its own line", g.nxid == 1 && !strcmp(g.xids, "48"));
	memset(&g, 0, sizeof(g));
	ck_gpu_xids(path, "0000:af:00.0", &g);
	test_cond("a GPU with no line: none", g.nxid == 0 && !g.xids[0] && !g.xid_err[0]);
	unlink(path);
	memset(&g, 0, sizeof(g));
	ck_gpu_xids(path, "0000:86:00.0", &g);
	test_err("a log that cannot be read: said", g.xid_err, "No such file or directory: Xid events not read");
}

/* gpu.health on crafted answers: a record per task with a GPU. */
static void healthy_gpus(struct ck_world *w)
{
	for (int i = 0; i < w->n; i++) {
		struct ck_rank *r = &w->ranks[i];
		struct ck_gpu_health *g = &r->gh;
		snprintf(r->gpu, sizeof(r->gpu), "0000:%02x:00.0", 0x20 + 0x10 * (i % 4));
		memset(g, 0, sizeof(*g));
		g->have = 1;
		snprintf(g->driver, sizeof(g->driver), "550.54.15");
		g->cuda = 12040;
		g->persistence = 1;
		g->sm_mhz = g->sm_max_mhz = 1980;
		g->limit_mw = g->default_limit_mw = 700000;
	}
}

static void test_gpu_health(void)
{
	struct ck_world *w = world(2, 2);
	struct nodes nd;

	ck_nodes_build(w, &nd);
	ck_eval_gpu(w, &nd);
	test_check("no GPUs: OK, saying so", w, "gpu.health", CK_OK, "no GPUs in this step");
	w->node_mode = 1;
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	ck_eval_p2p(w, &nd);
	test_check("--node, no GPUs: said of the node", w, "gpu.health", CK_OK, "no GPUs on this node");
	test_check("--node, no GPUs: no pairs on the node", w, "gpu.p2p", CK_OK, "no GPUs on this node");
	w->node_mode = 0;
	healthy_gpus(w);
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	test_check("healthy: OK with the driver", w, "gpu.health", CK_OK,
		   "4 GPUs read by NVML (driver 550.54.15, CUDA 12040): no uncorrected ECC error");
	snprintf(w->ranks[3].gh.driver, sizeof(w->ranks[3].gh.driver), "535.104.05");
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	test_check("drivers that differ: a warning naming both", w, "gpu.health", CK_WARN,
		   "drivers differ: gpu01 has 550.54.15 (CUDA 12040), gpu02 has 535.104.05 (CUDA 12040)");
	healthy_gpus(w);
	w->ranks[2].gh.remap_failed = 1;
	w->ranks[1].gh.retired_pending = 1;
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	test_check("a failed row remap: FAIL, with the warnings after it", w, "gpu.health", CK_FAIL,
		   "gpu02 GPU 0000:40:00.0 (task 2): a row remapping failed (the GPU needs service); and: gpu01 GPU "
		   "0000:30:00.0 (task 1): a page retirement waits for a GPU reset");
	healthy_gpus(w);
	w->ranks[0].gh.have = 0;
	snprintf(w->ranks[0].gh.err, sizeof(w->ranks[0].gh.err), "NVML not loaded: libnvidia-ml.so.1: no such file");
	w->ranks[3].proto = 5;
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	test_check("a node without NVML and an older ddp-check: warned, the rest judged", w, "gpu.health", CK_WARN,
		   "not read: gpu01 GPU 0000:20:00.0 (task 0): NVML not loaded");
	const struct ck_result *r = res(w, "gpu.health");
	test_cond("... the older task counted", r && strstr(r->msg, "1 tasks' ddp-check is older"));
	for (int i = 0; i < w->n; i++) {
		w->ranks[i].gh.have = 0;
		w->ranks[i].proto = CK_RECORD_PROTO;
		snprintf(w->ranks[i].gh.err, sizeof(w->ranks[i].gh.err), "NVML not loaded: libnvidia-ml.so.1");
	}
	w->nres = 0;
	ck_eval_gpu(w, &nd);
	test_check("NVML nowhere: skipped", w, "gpu.health", CK_SKIP, "NVML answered for none of the 4 tasks' GPUs");
	/* the record carries it */
	healthy_gpus(w);
	w->ranks[1].gh.ecc_vol = 12;
	w->ranks[1].gh.reasons = 0x48;
	snprintf(w->ranks[1].gh.xids, sizeof(w->ranks[1].gh.xids), "13,79");
	w->ranks[1].gh.nxid = 2;
	char buf[16384];
	struct ck_rank back;
	int len = ck_rank_encode(&w->ranks[1], buf, sizeof(buf));
	ck_rank_decode(&back, buf, len > 0 ? (size_t)len : 0);
	test_cond("the GPU's health in the record, both ways", back.gh.have == 1 && back.gh.ecc_vol == 12 &&
		  back.gh.reasons == 0x48 && !strcmp(back.gh.xids, "13,79") && back.gh.nxid == 2 &&
		  !strcmp(back.gh.driver, "550.54.15") && back.gh.limit_mw == 700000 && back.gh.persistence == 1);
	ck_nodes_free(&nd);
	drop(w);
}

/* gpu.p2p: peer reads between a node's GPUs, its NVLinks. */
static void test_p2p(void)
{
	struct ck_world *w = world(2, 2);
	struct nodes nd;

	ck_nodes_build(w, &nd);
	healthy_gpus(w);
	/* tasks 0, 1 on gpu01 (0000:20, 0000:30), tasks 2, 3 on gpu02 (0000:40, 0000:50) */
	for (int i = 0; i < 4; i++) {
		w->ranks[i].gh.nvlinks = 18;
		snprintf(w->ranks[i].gh.p2p, sizeof(w->ranks[i].gh.p2p), "%s:0;0000:90:00.0:5",
			 w->ranks[i ^ 1].gpu);
	}
	ck_eval_p2p(w, &nd);
	test_check("peer reads between each node's two GPUs, 18 NVLinks each: OK (a GPU no task uses not judged)", w,
		   "gpu.p2p", CK_OK, "4 GPUs: peer reads between every two of a node's (4 pairs both ways), 18 NVLinks active on each, no NVLink error");
	w->ranks[3].gh.nvlinks = 16;
	w->ranks[2].gh.nvl_crc = 40;
	snprintf(w->ranks[1].gh.p2p, sizeof(w->ranks[1].gh.p2p), "0000:20:00.0:3");
	w->nres = 0;
	ck_eval_p2p(w, &nd);
	test_check("an NVLink down: FAIL naming the GPU; errors and a pair without peer reads after it", w, "gpu.p2p",
		   CK_FAIL, "gpu02 GPU 0000:50:00.0: 16 of its NVLinks active where the node's others have 18; and: gpu01: GPU "
		   "0000:30:00.0 cannot read GPU 0000:20:00.0's memory directly (not supported by the I/O hub topology)");
	const struct ck_result *r = res(w, "gpu.p2p");
	test_cond("... and the link errors", r && strstr(r->msg, "gpu02 GPU 0000:40:00.0: NVLink errors since the driver "
						     "loaded: 0 recovery, 40 CRC or ECC"));
	for (int i = 0; i < 4; i++) {
		w->ranks[i].gh.nvlinks = -1;
		w->ranks[i].gh.nvl_crc = 0;
		snprintf(w->ranks[i].gh.p2p, sizeof(w->ranks[i].gh.p2p), "%s:0", w->ranks[i ^ 1].gpu);
	}
	w->nres = 0;
	ck_eval_p2p(w, &nd);
	test_check("PCIe GPUs: peer reads, no NVLink", w, "gpu.p2p", CK_OK, "(4 pairs both ways); no NVLink");
	char buf[16384];
	struct ck_rank back;
	w->ranks[0].gh.nvlinks = 12;
	w->ranks[0].gh.nvl_recovery = 3;
	int len = ck_rank_encode(&w->ranks[0], buf, sizeof(buf));
	ck_rank_decode(&back, buf, len > 0 ? (size_t)len : 0);
	test_cond("NVLinks and peer reads in the record", back.gh.nvlinks == 12 && back.gh.nvl_recovery == 3 &&
		  !strcmp(back.gh.p2p, "0000:30:00.0:0"));
	ck_nodes_free(&nd);
	drop(w);
}

int main(void)
{
	test_records();
	test_sizes();
	test_healthy();
	test_contract_faults();
	test_network_faults();
	test_memlock();
	test_nofile();
	test_nproc();
	test_user_threads();
	test_shm();
	test_nccl_env();
	test_mixed_versions();
	test_threads();
	test_binding_faults();
	test_nvidia();
	test_gres();
	test_mig();
	test_shared_gpus();
	test_coll_faults();
	test_probe();
	test_kill_wait();
	test_slurm_query();
	test_hw_sysfs();
	test_pcie();
	test_h2d();
	test_p2p_bw();
	test_fabric();
	test_baseline();
	test_ops();
	test_pairs();
	test_xids();
	test_gpu_health();
	test_p2p();
	return test_report();
}
