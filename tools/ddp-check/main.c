/*
 * ddp-check: run as a task of `srun --ddp=nccl|gloo ddp-check`; validates
 * the step's distributed-training set-up and says exactly what is wrong.
 *
 * Every task finds out what it can about itself (its contract variables,
 * interface, CPUs, GPU), joins the libddpenv store at MASTER_ADDR:
 * MASTER_PORT under its Slurm task id (so a wrong RANK or WORLD_SIZE is
 * reported, not fatal), and sends its record to task 0.  Task 0 names one
 * prober per node, the probers connect to each other's listeners (and
 * compare clocks with the head node), task 0 decides whether a collective
 * can work, every task runs exact all-reduces and the bandwidth sweep,
 * and task 0 prints the report.  Every wait is bounded by --timeout.
 *
 * Exit status: 0 every check OK (or WARN), 1 a check FAILED, 2 a usage
 * or set-up error (not a task of a step, a bad option).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "board.h"
#include "check.h"
#include "coll.h"
#include "comm.h"
#include "ddpenv_store.h"
#include "node.h"
#include "opts.h"
#include "probe.h"
#include "self.h"

#define RECLEN 16384

static void got_rank(void *ctx, int id, const char *buf, size_t len)
{
	struct ck_world *w = ctx;
	struct ck_rank r;
	if (ck_rank_decode(&r, buf, len) == 0 && r.id == id) {
		w->ranks[id] = r;
		w->ranks[id].joined = 1;
	}
}

static void got_probe(void *ctx, int id, const char *buf, size_t len)
{
	struct ck_world *w = ctx;
	ck_probe_free(&w->probes[id]);
	ck_probe_decode(&w->probes[id], buf, len);
}

static void got_coll(void *ctx, int id, const char *buf, size_t len)
{
	struct ck_world *w = ctx;
	ck_coll_decode(&w->colls[id], buf, len);
}

/* ---- task 0's plan for the probes --------------------------------------- */

/* "node\tendpoint\thead" lines: one prober per node; buf is a string
 * (empty where no node has a listener, e.g. every interface missing). */
static size_t make_plan(const struct ck_world *w, char *buf, size_t len, int *probers)
{
	size_t off = 0;
	int head_node = -1;

	buf[0] = '\0';

	for (int i = 0; i < w->n; i++) {
		const struct ck_rank *r = &w->ranks[i];
		probers[i] = 0;
		if (!r->joined || !r->probe[0])
			continue;
		int dup = 0;
		for (int j = 0; j < i && !dup; j++)
			dup = probers[j] && !strcmp(w->ranks[j].host, r->host);
		if (dup)
			continue;
		probers[i] = 1;
		if (head_node < 0 && r->head_local == 1)
			head_node = i;
	}
	for (int i = 0; i < w->n; i++)
		if (probers[i])
			off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%d\t%s\t%s\t%d\n", i,
						w->ranks[i].host, w->ranks[i].probe, i == head_node);
	return off < len ? off : len;
}

/* ---- main ------------------------------------------------------------------ */

/* Task 0's store refused a client (a wrong DDP_RDZV_TOKEN): keep the first
 * few for the rdzv.join check.  Called from the store's thread. */
static pthread_mutex_t refused_mu = PTHREAD_MUTEX_INITIALIZER;
static char refused[CK_MSG];

static void log_refused(void *ctx, const char *msg)
{
	(void)ctx;
	pthread_mutex_lock(&refused_mu);
	size_t l = strlen(refused);
	if (l < sizeof(refused) - 1)
		snprintf(refused + l, sizeof(refused) - l, "%s%s", l ? "; " : "", msg);
	pthread_mutex_unlock(&refused_mu);
}

static void local_fail(const struct self *me, const char *check, const char *msg, int json)
{
	if (me->id == 0) {
		/* Task 0 reports for the step, even when it cannot gather. */
		struct ck_world w = { .backend = me->backend, .n = me->n, .step_nodes = me->step_nodes };
		struct ck_rank *r = calloc((size_t)me->n, sizeof(*r));
		w.ranks = r;
		if (r) {
			r[0] = me->r;
			r[0].joined = 1;
		}
		ck_add(&w, check, CK_FAIL, "task 0 (%s): %s", me->r.host, msg);
		if (json)
			ck_report_json(&w, stdout);
		else
			ck_report_text(&w, stdout);
		free(w.res);
		free(r);
	} else {
		fprintf(stderr, "ddp-check: task %d (%s): FAIL %s: %s\n", me->id, me->r.host, check, msg);
	}
}

/* The longest task 0 waits for the controller's KillWait, from its start
 * (or --timeout, if shorter): libslurm's own bound is MessageTimeout (10 s
 * by default), and 60 s of retries for a slurm.conf it cannot read. */
#define SLURM_WAIT_S 20

/* Ends a query not answered (an early exit): its child killed and reaped. */
static void slurm_drop(struct ck_slurm_query *q)
{
	struct ck_slurm x;

	if (q->pid)
		ck_slurm_answer(q, 0, &x);
}

/* One task's run: what each phase reads and leaves for the next. */
struct run {
	struct self me;
	struct ck_cli cli;
	struct ck_slurm_query sq;        /* task 0's question to the controller */
	struct ck_listener lis;          /* this node's probe listener */
	struct ddpenv_store *s;
	struct ck_world w;               /* task 0: every task's records, the verdicts */
	int *probers;                    /* task 0: the tasks that probe for their node */
	char *plan;                      /* the probe plan (make_plan's lines) */
	char *rec;                       /* RECLEN bytes for this task's records */
	int wait_ms;                     /* the others' bound on waiting for task 0 */
	char err[DDPENV_ERRLEN];
};

/* Who am I: Slurm's task id (immune to a wrong RANK), else RANK.  0, else
 * the exit status, said. */
static int identify(struct self *me)
{
	long v;
	const char *pid_s = getenv("SLURM_PROCID");
	const char *nt_s = getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : getenv("SLURM_NTASKS");
	const char *nn_s = getenv("SLURM_STEP_NUM_NODES") ? getenv("SLURM_STEP_NUM_NODES") : getenv("SLURM_NNODES");
	if (getenv("SLURM_HET_SIZE") || !pid_s || !nt_s) {
		pid_s = getenv("RANK");
		nt_s = getenv("WORLD_SIZE");
		nn_s = NULL;
	}
	if (nn_s && ck_parse_int(nn_s, 1, 1 << 24, &v) == 0)
		me->step_nodes = (int)v;
	if (!pid_s || !nt_s || ck_parse_int(pid_s, 0, 1 << 24, &v) < 0) {
		fprintf(stderr, "ddp-check: not a task of a distributed step (no SLURM_PROCID or RANK): run "
			"it as srun --ddp=nccl|gloo ddp-check, or set RANK WORLD_SIZE MASTER_ADDR MASTER_PORT\n");
		return 2;
	}
	me->id = (int)v;
	if (ck_parse_int(nt_s, 1, 1 << 24, &v) < 0 || me->id >= v) {
		fprintf(stderr, "ddp-check: task count '%s' with task id %d: expected a count above the id\n",
			nt_s, me->id);
		return 2;
	}
	me->n = (int)v;
	me->r.id = me->id;
	const char *lr = getenv("SLURM_LOCALID") ? getenv("SLURM_LOCALID") : getenv("LOCAL_RANK");
	me->local_rank = lr ? atoi(lr) : 0;
	me->prober = !lr || me->local_rank == 0;
	return 0;
}

/* --backend, else DDP_BACKEND, else nccl where CUDA_VISIBLE_DEVICES lists
 * GPUs: NULL said when it is neither nccl nor gloo. */
static const char *choose_backend(const char *asked)
{
	const char *b = asked ? asked : getenv("DDP_BACKEND");
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	if (!b || !*b || !strcmp(b, "auto"))
		b = cvd && *cvd ? "nccl" : "gloo";
	if (strcmp(b, "nccl") && strcmp(b, "gloo")) {
		fprintf(stderr, "ddp-check: backend '%s': expected nccl or gloo\n", b);
		return NULL;
	}
	return b;
}

/* MASTER_ADDR as an address, or the name resolved (head_err otherwise). */
static void find_head(struct self *me, const char *ma)
{
	struct ddpenv_addr a[4];
	char err[DDPENV_ERRLEN];
	if (!ma || !*ma)
		return;
	if (ddpenv_addr_parse(ma, &me->head) == 0) {
		me->head_ok = 1;
	} else if (ddpenv_sys_lookup(NULL, ma, a, 4, err, sizeof(err)) > 0) {
		me->head = a[0];
		me->head_ok = 1;
	} else {
		snprintf(me->r.head_err, sizeof(me->r.head_err), "MASTER_ADDR=%s does not resolve", ma);
	}
}

/* For NCCL, the GPU as CUDA sees it under this task's CUDA_VISIBLE_DEVICES
 * is the truth; a failure is reported with the rest (the other checks
 * still run). */
static void find_nccl_gpu(struct self *me)
{
	int dev, count;
	char busid[DDPENV_BUSIDLEN], err[DDPENV_ERRLEN];
	if (ck_nccl_load(err, sizeof(err)) < 0 ||
	    ck_nccl_device(me->local_rank, &dev, &count, busid, sizeof(busid), err, sizeof(err)) < 0) {
		snprintf(me->r.backend_err, sizeof(me->r.backend_err), "%s", err);
		fprintf(stderr, "ddp-check: task %d (%s): FAIL coll.backend: %s\n", me->id, me->r.host, err);
		return;
	}
	snprintf(me->r.gpu, sizeof(me->r.gpu), "%s", busid);
	me->r.visible = count;
	me->r.nccl_version = ck_nccl_version();
	snprintf(me->r.gpu_from, sizeof(me->r.gpu_from), "CUDA device %d", dev);
}

/* Everything this task finds out about itself, into me->r. */
static void discover(struct self *me, const struct ck_opts *o)
{
	int nccl = !strcmp(me->backend, "nccl");
	find_head(me, getenv("MASTER_ADDR"));
	ck_self_gpus(me);
	if (nccl)
		find_nccl_gpu(me);
	ck_self_iface(me);
	ck_self_binding(me);
	ck_self_hw(me);
	ck_self_h2d(me, o->h2d_bytes);
	ck_self_p2p(me, o->p2p_bytes);
	ck_self_gpu_health(me);
	ck_self_limits(me);
	ck_self_nccl_env(me);
	/* only NCCL keeps segments there (a bounded query of logind, a 4 MiB
	 * file made and removed) */
	if (nccl) {
		ck_self_shm(me);
	} else {
		me->r.shm_size = me->r.shm_free = -1;
		me->r.removeipc = -1;
	}
}

/* Join the store at MASTER_ADDR:MASTER_PORT (with this node's probe
 * listener up first) and publish this task's record.  0, else -1 with
 * the failure reported as rdzv.join. */
static int join(struct run *x)
{
	struct self *me = &x->me;
	const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
	long port;
	if (!ma || !*ma || !mp || ck_parse_int(mp, 1, 65535, &port) < 0) {
		snprintf(x->err, sizeof(x->err), "MASTER_ADDR='%s' MASTER_PORT='%s': the rendezvous needs both "
			 "(a port 1..65535); run it with srun --ddp", ma ? ma : "", mp ? mp : "");
		local_fail(me, "rdzv.join", x->err, x->cli.json);
		return -1;
	}
	/* A listener for this node's probes, on the address peers will use. */
	if (me->prober && me->r.ifaddr[0] &&
	    ck_listen_start(&x->lis, me->r.ifaddr, me->r.host, x->err, sizeof(x->err)) == 0)
		snprintf(me->r.probe, sizeof(me->r.probe), "%s", x->lis.endpoint);

	struct ddpenv_store_opts so = { ma, (int)port, me->id, me->n, x->cli.o.timeout_s * 1000,
					getenv("DDP_RDZV_TOKEN"), log_refused, NULL };
	if (ddpenv_store_open(&x->s, &so, x->err, sizeof(x->err)) < 0) {
		local_fail(me, "rdzv.join", x->err, x->cli.json);
		return -1;
	}
	me->r.joined_s = ck_task_age();
	int len = x->rec ? ck_rank_encode(&me->r, x->rec, RECLEN) : -1;
	if (len < 0 || ck_board_publish(x->s, "rank", me->id, x->rec, (size_t)len, x->err, sizeof(x->err)) < 0) {
		local_fail(me, "rdzv.join", len < 0 ? "record too large" : x->err, x->cli.json);
		ddpenv_store_close_within(x->s, 1000);
		x->s = NULL;
		return -1;
	}
	return 0;
}

/* Task 0's room for every task's records.  0, else -1 (reported). */
static int alloc_world(struct run *x)
{
	int n = x->me.n;
	x->w.ranks = calloc((size_t)n, sizeof(*x->w.ranks));
	x->w.probes = calloc((size_t)n, sizeof(*x->w.probes));
	x->w.colls = calloc((size_t)n, sizeof(*x->w.colls));
	x->w.gone = calloc((size_t)n, 1);
	x->probers = calloc((size_t)n, sizeof(int));
	if (x->w.ranks && x->w.probes && x->w.colls && x->w.gone && x->probers)
		return 0;
	local_fail(&x->me, "ddp-check", "out of memory", x->cli.json);
	return -1;
}

/* Task 0 gathers the records and publishes the probe plan; the others
 * read it.  0, else -1 (the store failed: x->err). */
static int share_plan(struct run *x)
{
	struct self *me = &x->me;
	void *v;
	size_t l;
	if (me->id != 0) {
		if (ddpenv_store_get(x->s, "ck/plan", x->wait_ms, &v, &l, x->err, sizeof(x->err)) < 0)
			return -1;
		x->plan = v;   /* NUL-terminated by the store client */
		return 0;
	}
	if (ck_board_gather(x->s, "rank", me->n, me->n, ck_mono() + x->cli.o.timeout_s, x->w.gone, got_rank,
			    &x->w, x->err, sizeof(x->err)) < 0)
		return -1;
	pthread_mutex_lock(&refused_mu);
	snprintf(x->w.refused, sizeof(x->w.refused), "%s", refused);
	pthread_mutex_unlock(&refused_mu);
	/* A line per node: "id \t host \t endpoint \t head" */
	size_t cap = (size_t)me->n * (CK_HOST + 112) + 1;
	char *plan = malloc(cap);
	if (!plan) {
		snprintf(x->err, sizeof(x->err), "out of memory for the probe plan of %d tasks", me->n);
		return -1;
	}
	size_t pl = make_plan(&x->w, plan, cap, x->probers);
	int rv = ddpenv_store_set(x->s, "ck/plan", plan, pl, x->err, sizeof(x->err));
	/* set after the call: clang 19's analyzer takes a call given x->err as one
	 * that may write all of *x, x->plan included */
	x->plan = plan;
	return rv;
}

/* The plan's other nodes into t (n + 1 entries); whether this task is
 * one of the probers (*mine), and how many there are. */
static int read_plan(const char *plan, int me_id, int n, struct ck_target *t, size_t *nt, int *mine)
{
	int nprobers = 0;
	*nt = 0;
	*mine = 0;
	for (const char *line = plan; *line;) {
		int id, head;
		char node[CK_HOST], ep[80];
		if (sscanf(line, "%d\t%63[^\t]\t%79[^\t]\t%d", &id, node, ep, &head) == 4) {
			nprobers++;
			if (id == me_id) {
				*mine = 1;
			} else if (*nt < (size_t)n) {
				snprintf(t[*nt].node, sizeof(t[*nt].node), "%s", node);
				snprintf(t[*nt].addr, sizeof(t[*nt].addr), "%s", ep);
				t[*nt].head = head;
				(*nt)++;
			}
		}
		const char *nl = strchr(line, '\n');
		line = nl ? nl + 1 : line + strlen(line);
	}
	return nprobers;
}

/* This node's prober reaches every other node's listener and publishes
 * what it saw.  0, else -1 (the store failed). */
static int run_probe(struct run *x, const struct ck_target *t, size_t nt)
{
	struct ck_probe pr;
	int rc = 0;
	if (ck_probe_run(t, nt, x->cli.o.probe_ms, &pr) != 0)
		return 0;
	/* a peer line is at most ~400 bytes */
	size_t pcap = (nt + 4) * 512;
	char *pb = malloc(pcap);
	int pbl = pb ? ck_probe_encode(&pr, pb, pcap) : -1;
	if (pbl >= 0 && ck_board_publish(x->s, "probe", x->me.id, pb, (size_t)pbl, x->err, sizeof(x->err)) < 0)
		rc = -1;
	free(pb);
	ck_probe_free(&pr);
	return rc;
}

/* Probers reach every other node; task 0 gathers what they saw.  0, else
 * -1 (the store failed). */
static int probe(struct run *x)
{
	struct self *me = &x->me;
	struct ck_target *t = calloc((size_t)me->n + 1, sizeof(*t));
	size_t nt = 0;
	int mine = 0, nprobers = 0;
	if (t)
		nprobers = read_plan(x->plan, me->id, me->n, t, &nt, &mine);
	int rc = mine ? run_probe(x, t, nt) : 0;
	free(t);
	if (rc < 0 || me->id != 0)
		return rc;
	/* The probers report within about probe-timeout per batch. */
	int probe_ms = x->cli.o.probe_ms;
	double pd = ck_mono() + (double)probe_ms / 1000 * ((me->n + 127) / 128 + 2) + 5;
	return ck_board_gather(x->s, "probe", me->n, nprobers, pd, NULL, got_probe, &x->w, x->err,
			       sizeof(x->err));
}

/* Task 0 decides whether the collectives can work; everyone follows.
 * 1 go, 0 not, -1 the store failed. */
static int decide(struct run *x)
{
	void *v;
	size_t l;
	if (x->me.id != 0) {
		if (ddpenv_store_get(x->s, "ck/go", x->wait_ms, &v, &l, x->err, sizeof(x->err)) < 0)
			return -1;
		int go = l > 0 && ((char *)v)[0] == '1';
		free(v);
		return go;
	}
	/* the controller has had the whole set-up to answer */
	int timeout_s = x->cli.o.timeout_s;
	ck_slurm_answer(&x->sq, x->sq.started + (timeout_s < SLURM_WAIT_S ? timeout_s : SLURM_WAIT_S),
			&x->w.slurm);
	ck_eval_setup(&x->w);
	int ok = ck_coll_safe(&x->w, x->w.coll_skip, sizeof(x->w.coll_skip));
	snprintf(x->rec, RECLEN, "%d", ok);
	if (ddpenv_store_set(x->s, "ck/go", x->rec, strlen(x->rec), x->err, sizeof(x->err)) < 0)
		return -1;
	return ok;
}

/* Every task runs the exact all-reduces and the sweep; task 0 gathers the
 * results.  0 or 1 (this task's all-reduce failed), else -1 (the store). */
static int collectives(struct run *x)
{
	struct self *me = &x->me;
	struct ck_coll mine;
	ck_run_colls(me, x->s, &x->cli.o, x->w.sizes, x->w.nsizes, &mine);
	if (!mine.ok)
		fprintf(stderr, "ddp-check: task %d (%s): FAIL coll.allreduce: %s\n", me->id, me->r.host,
			mine.msg);
	int cl = ck_coll_encode(&mine, x->rec, RECLEN);
	if (cl < 0 || ck_board_publish(x->s, "coll", me->id, x->rec, (size_t)cl, x->err, sizeof(x->err)) < 0)
		return -1;
	if (me->id == 0) {
		x->w.coll_ran = 1;
		if (ck_board_gather(x->s, "coll", me->n, me->n, ck_mono() + x->cli.o.timeout_s, x->w.gone,
				    got_coll, &x->w, x->err, sizeof(x->err)) < 0)
			return -1;
	}
	return !mine.ok;
}

/* Task 0 prints the report and releases the others; they wait for it
 * (so task 0's store stays up until they are done).  The exit status. */
static int finish(struct run *x, int rc)
{
	struct self *me = &x->me;
	void *v;
	size_t l;
	if (me->id != 0) {
		if (ddpenv_store_get(x->s, "ck/done", x->wait_ms, &v, &l, x->err, sizeof(x->err)) == 0)
			free(v);
		ddpenv_store_close(x->s);
		return rc;
	}
	ck_eval_coll(&x->w);
	ck_eval_ops(&x->w);
	ck_eval_pairs(&x->w);
	if (x->cli.json)
		ck_report_json(&x->w, stdout);
	else
		ck_report_text(&x->w, stdout);
	rc = ck_exit_code(&x->w);
	snprintf(x->rec, RECLEN, "%d", rc);
	ddpenv_store_set(x->s, "ck/done", x->rec, strlen(x->rec), x->err, sizeof(x->err));
	int missing = 0;
	for (int i = 0; i < me->n; i++)
		missing += !x->w.ranks[i].joined;
	ddpenv_store_close_within(x->s, missing ? 3000 : x->cli.o.timeout_s * 1000);
	return rc;
}

/* The rendezvous broke after the join: said, the store let go. */
static int store_failed(struct run *x)
{
	struct self *me = &x->me;
	ck_listen_stop(&x->lis);
	if (me->id == 0)
		fprintf(stderr, "ddp-check: task 0 (%s): the rendezvous failed midway: %s\n", me->r.host, x->err);
	else
		fprintf(stderr, "ddp-check: task %d (%s): FAIL rdzv: lost task 0's rendezvous (task 0 died, "
			"or its node is unreachable): %s\n", me->id, me->r.host, x->err);
	ddpenv_store_close_within(x->s, 1000);
	return 1;
}

/* After the join: the plan, the probes, the decision, the collectives,
 * the report.  The exit status. */
static int run_step(struct run *x)
{
	int rc = 0, go;
	if (x->me.id == 0 && alloc_world(x) < 0) {
		ddpenv_store_close_within(x->s, 1000);
		ck_listen_stop(&x->lis);
		return 1;
	}
	if (share_plan(x) < 0 || probe(x) < 0 || (go = decide(x)) < 0)
		return store_failed(x);
	ck_listen_stop(&x->lis);
	if (go && (rc = collectives(x)) < 0)
		return store_failed(x);
	return finish(x, rc);
}

static void run_free(struct run *x)
{
	slurm_drop(&x->sq);
	ck_listen_stop(&x->lis);
	if (x->w.probes)
		for (int i = 0; i < x->me.n; i++)
			ck_probe_free(&x->w.probes[i]);
	free(x->w.ranks);
	free(x->w.probes);
	free(x->w.colls);
	free(x->w.gone);
	free(x->w.res);
	free(x->probers);
	free(x->plan);
	free(x->rec);
}

int main(int argc, char **argv)
{
	static struct run x = {
		.cli.o = { .min_bytes = 8, .max_bytes = 256u << 20, .step_factor = 2, .iters = 20, .warmup = 5,
			   .max_skew_ms = 100, .probe_ms = 2000, .timeout_s = 60, .min_kill_wait = 10,
			   .min_baseline = 80, .pair_bytes = 16u << 20, .min_pair = 50,
			   .h2d_bytes = 64u << 20, .min_h2d = 50, .p2p_bytes = 64u << 20, .min_p2p = 50 },
		.lis = { .fd = -1 },
		.me.r = { .head_local = -1, .gpu_numa = -1, .visible = -1 },
	};
	struct self *me = &x.me;
	int rc = ck_cli_parse(argc, argv, &x.cli);
	if (rc >= 0)
		return rc;
	if (x.cli.node)
		return ck_node_run(&x.cli);

	gethostname(me->r.host, sizeof(me->r.host) - 1);
	me->r.pid = (long)getpid();
	ck_self_env(me);
	if (identify(me) || !(me->backend = choose_backend(x.cli.backend)))
		return 2;
	/* Task 0 asks the controller while the others join: before any thread
	 * (CUDA's, the store's) exists, since the query forks. */
	if (me->id == 0)
		ck_slurm_ask(&x.sq, getenv("SLURM_JOB_ID"));
	discover(me, &x.cli.o);

	x.rec = malloc(RECLEN);
	x.w = (struct ck_world){ .backend = me->backend, .n = me->n, .step_nodes = me->step_nodes,
				 .opts = x.cli.o };
	x.w.nsizes = ck_sizes(&x.cli.o, x.w.sizes, CK_MAX_SIZES);
	/* The others wait on task 0 for as long as it may wait on them. */
	x.wait_ms = (x.cli.o.timeout_s * 3 + 30) * 1000;
	rc = join(&x) < 0 ? 1 : run_step(&x);
	run_free(&x);
	return rc;
}
