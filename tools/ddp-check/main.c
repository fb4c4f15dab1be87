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
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "coll.h"
#include "comm.h"
#include "ddpenv_store.h"
#include "probe.h"
#include "self.h"

#define KEYLEN 64
#define RECLEN 16384

static void usage(FILE *out)
{
	fprintf(out,
		"usage: srun --ddp=nccl|gloo [srun options] ddp-check [options]\n"
		"\n"
		"Checks the distributed-training set-up of the step it runs in: the env://\n"
		"contract on every task, the rendezvous, each node's interface, reachability\n"
		"between nodes, clock skew, CPU and GPU binding, an exact all-reduce and the\n"
		"all-reduce bandwidth (nccl-tests' algbw and busbw).  Task 0 prints the report.\n"
		"\n"
		"  -b, --minbytes=SIZE     smallest all-reduce of the sweep (default 8)\n"
		"  -e, --maxbytes=SIZE     largest (default 256M; 0: no sweep)\n"
		"  -f, --stepfactor=N      size multiplier between steps (default 2)\n"
		"  -n, --iters=N           timed iterations per size (default 20)\n"
		"  -w, --warmup=N          untimed iterations per size (default 5)\n"
		"      --min-busbw=GB/s    FAIL when busbw at the largest size is lower\n"
		"      --max-skew=MS       WARN when a node's clock is off by more (default 100)\n"
		"      --probe-timeout=MS  bound on each node-to-node probe (default 2000)\n"
		"      --min-kill-wait=S   WARN when slurm.conf's KillWait is lower (default 10)\n"
		"      --timeout=S         bound on every wait for another task (default 60)\n"
		"                          and, up to 20, for the controller\n"
		"      --backend=nccl|gloo the collective library (default: DDP_BACKEND)\n"
		"      --json              the report as one JSON object\n"
		"  -h, --help              this text\n"
		"  -V, --version           the version\n"
		"\n"
		"SIZE takes K, M and G suffixes (powers of 1024).  Exit status: 0 every check\n"
		"OK or WARN, 1 a check FAILED, 2 a usage or set-up error.\n");
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double m = 1;
	if (end == s || errno || v < 0)
		return -1;
	switch (*end) {
	case 'k': case 'K': m = 1024; end++; break;
	case 'm': case 'M': m = 1024.0 * 1024; end++; break;
	case 'g': case 'G': m = 1024.0 * 1024 * 1024; end++; break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v * m > 16.0 * 1024 * 1024 * 1024)
		return -1;
	*out = (size_t)(v * m);
	return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static const char *env_or(const char *k, const char *dflt)
{
	const char *v = getenv(k);
	return v ? v : dflt;
}

/* ---- the store, as a bulletin board ------------------------------------- */

static int publish(struct ddpenv_store *s, const char *phase, int id, const char *buf, size_t len,
		   char *err, size_t errlen)
{
	char key[KEYLEN];
	int64_t v;
	snprintf(key, sizeof(key), "ck/%s/%d", phase, id);
	if (ddpenv_store_set(s, key, buf, len, err, errlen) < 0)
		return -1;
	snprintf(key, sizeof(key), "ck/in/%s/%d", phase, id);
	if (ddpenv_store_add(s, key, 1, &v, err, errlen) < 0)
		return -1;
	snprintf(key, sizeof(key), "ck/count/%s", phase);
	return ddpenv_store_add(s, key, 1, &v, err, errlen);
}

/* The tasks whose connection to the store closed (died, or left: a task
 * leaves after its last record, or on an error of its own) without
 * phase's record: marked in gone; how many, or -1. */
static int unreported(struct ddpenv_store *s, const char *phase, int n, unsigned char *gone,
		      char *err, size_t errlen)
{
	int *ids = malloc((size_t)n * sizeof(*ids)), found = 0;
	if (!ids) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int how = CK_GONE_DIED; how <= CK_GONE_LEFT; how++) {
		int k = how == CK_GONE_DIED ? ddpenv_store_dead_ranks(s, ids, n, err, errlen) :
					      ddpenv_store_left_ranks(s, ids, n, err, errlen);
		if (k < 0) {
			free(ids);
			return -1;
		}
		for (int i = 0; i < k && i < n; i++) {
			char key[KEYLEN];
			int64_t in;
			if (ids[i] <= 0 || ids[i] >= n)   /* (task 0 is this one) */
				continue;
			snprintf(key, sizeof(key), "ck/in/%s/%d", phase, ids[i]);
			if (ddpenv_store_add(s, key, 0, &in, err, errlen) < 0) {
				free(ids);
				return -1;
			}
			if (!in) {
				if (!gone[ids[i]])
					gone[ids[i]] = (unsigned char)how;
				found++;
			}
		}
	}
	free(ids);
	return found;
}

/* Task 0: wait until want records of phase are in (or the deadline), then
 * hand each present one to fn.  Never a get that could time out: the count
 * is polled, and a record is fetched only once it exists.  With gone (want
 * is every task then), it also asks the store every half second which tasks
 * closed their connection without the record: those are marked there and
 * not waited for (a killed task no longer holds the report for --timeout). */
static int gather(struct ddpenv_store *s, const char *phase, int n, int want, double deadline,
		  unsigned char *gone, void (*fn)(void *, int, const char *, size_t), void *ctx,
		  char *err, size_t errlen)
{
	char key[KEYLEN];
	int64_t cnt = 0;
	double look = ck_mono() + 0.5;
	snprintf(key, sizeof(key), "ck/count/%s", phase);
	for (;;) {
		if (ddpenv_store_add(s, key, 0, &cnt, err, errlen) < 0)
			return -1;
		if (cnt >= want || ck_mono() > deadline)
			break;
		if (gone && ck_mono() > look) {
			int k = unreported(s, phase, n, gone, err, errlen);
			if (k < 0)
				return -1;
			if (cnt + k >= want)
				break;
			look = ck_mono() + 0.5;
		}
		usleep(cnt + 1 >= want ? 2000 : 20000);
	}
	for (int id = 0; id < n; id++) {
		int64_t in;
		void *v;
		size_t l;
		snprintf(key, sizeof(key), "ck/in/%s/%d", phase, id);
		if (ddpenv_store_add(s, key, 0, &in, err, errlen) < 0)
			return -1;
		if (!in)
			continue;
		snprintf(key, sizeof(key), "ck/%s/%d", phase, id);
		if (ddpenv_store_get(s, key, 5000, &v, &l, err, errlen) < 0)
			return -1;
		fn(ctx, id, v, l);
		free(v);
	}
	return 0;
}

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

int main(int argc, char **argv)
{
	struct ck_opts o = { .min_bytes = 8, .max_bytes = 256u << 20, .step_factor = 2, .iters = 20,
			     .warmup = 5, .max_skew_ms = 100, .probe_ms = 2000, .timeout_s = 60,
			     .min_kill_wait = 10 };
	const char *backend = NULL;
	int json = 0;
	static const struct option lo[] = {
		{ "minbytes", required_argument, NULL, 'b' },
		{ "maxbytes", required_argument, NULL, 'e' },
		{ "stepfactor", required_argument, NULL, 'f' },
		{ "iters", required_argument, NULL, 'n' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "min-busbw", required_argument, NULL, 'B' },
		{ "max-skew", required_argument, NULL, 'S' },
		{ "probe-timeout", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "min-kill-wait", required_argument, NULL, 'K' },
		{ "backend", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	int ch;
	long v;
	while ((ch = getopt_long(argc, argv, "b:e:f:n:w:hV", lo, NULL)) != -1) {
		char *end;
		switch (ch) {
		case 'b':
		case 'e':
			if (parse_size(optarg, ch == 'b' ? &o.min_bytes : &o.max_bytes) < 0) {
				fprintf(stderr, "ddp-check: --%s '%s': expected a size like 8, 64K, 256M "
					"(at most 16G)\n", ch == 'b' ? "minbytes" : "maxbytes", optarg);
				return 2;
			}
			break;
		case 'f':
			if (parse_int(optarg, 2, 1024, &v) < 0) {
				fprintf(stderr, "ddp-check: --stepfactor '%s': expected 2..1024\n", optarg);
				return 2;
			}
			o.step_factor = (int)v;
			break;
		case 'n':
		case 'w':
			if (parse_int(optarg, ch == 'n' ? 1 : 0, 100000, &v) < 0) {
				fprintf(stderr, "ddp-check: --%s '%s': expected %d..100000\n",
					ch == 'n' ? "iters" : "warmup", optarg, ch == 'n');
				return 2;
			}
			*(ch == 'n' ? &o.iters : &o.warmup) = (int)v;
			break;
		case 'B':
		case 'S':
			errno = 0;
			double d = strtod(optarg, &end);
			if (end == optarg || *end || errno || !(d >= 0) || d > 1e9) {
				fprintf(stderr, "ddp-check: --%s '%s': expected a non-negative number\n",
					ch == 'B' ? "min-busbw" : "max-skew", optarg);
				return 2;
			}
			*(ch == 'B' ? &o.min_busbw : &o.max_skew_ms) = d;
			break;
		case 'P':
		case 'T':
			if (parse_int(optarg, 1, ch == 'P' ? 600000 : 86400, &v) < 0) {
				fprintf(stderr, "ddp-check: --%s '%s': expected 1..%d %s\n",
					ch == 'P' ? "probe-timeout" : "timeout", optarg,
					ch == 'P' ? 600000 : 86400, ch == 'P' ? "milliseconds" : "seconds");
				return 2;
			}
			*(ch == 'P' ? &o.probe_ms : &o.timeout_s) = (int)v;
			break;
		case 'K':
			if (parse_int(optarg, 0, 65533, &v) < 0) {
				fprintf(stderr, "ddp-check: --min-kill-wait '%s': expected 0..65533 seconds\n",
					optarg);
				return 2;
			}
			o.min_kill_wait = (int)v;
			break;
		case 'k':
			backend = optarg;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
#ifdef HAVE_NCCL
			printf("ddp-check %s (NCCL path built; libnccl and libcudart are loaded at run time)\n",
			       DDPENV_VERSION);
#else
			printf("ddp-check %s (gloo only: built without CUDA and NCCL headers)\n",
			       DDPENV_VERSION);
#endif
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ddp-check: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (o.min_bytes > o.max_bytes && o.max_bytes) {
		fprintf(stderr, "ddp-check: --minbytes %zu is larger than --maxbytes %zu\n", o.min_bytes,
			o.max_bytes);
		return 2;
	}

	struct self me;
	memset(&me, 0, sizeof(me));
	me.r.head_local = -1;
	me.r.gpu_numa = -1;
	me.r.visible = -1;
	gethostname(me.r.host, sizeof(me.r.host) - 1);
	me.r.pid = (long)getpid();
	ck_self_env(&me);

	/* Who am I: Slurm's task id (immune to a wrong RANK), else RANK. */
	const char *pid_s = getenv("SLURM_PROCID");
	const char *nt_s = getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : getenv("SLURM_NTASKS");
	const char *nn_s = getenv("SLURM_STEP_NUM_NODES") ? getenv("SLURM_STEP_NUM_NODES") : getenv("SLURM_NNODES");
	if (getenv("SLURM_HET_SIZE") || !pid_s || !nt_s) {
		pid_s = getenv("RANK");
		nt_s = getenv("WORLD_SIZE");
		nn_s = NULL;
	}
	if (nn_s && parse_int(nn_s, 1, 1 << 24, &v) == 0)
		me.step_nodes = (int)v;
	if (!pid_s || !nt_s || parse_int(pid_s, 0, 1 << 24, &v) < 0) {
		fprintf(stderr, "ddp-check: not a task of a distributed step (no SLURM_PROCID or RANK): run "
			"it as srun --ddp=nccl|gloo ddp-check, or set RANK WORLD_SIZE MASTER_ADDR MASTER_PORT\n");
		return 2;
	}
	me.id = (int)v;
	if (parse_int(nt_s, 1, 1 << 24, &v) < 0 || me.id >= v) {
		fprintf(stderr, "ddp-check: task count '%s' with task id %d: expected a count above the id\n",
			nt_s, me.id);
		return 2;
	}
	me.n = (int)v;
	me.r.id = me.id;
	const char *lr = getenv("SLURM_LOCALID") ? getenv("SLURM_LOCALID") : getenv("LOCAL_RANK");
	me.local_rank = lr ? atoi(lr) : 0;
	me.prober = !lr || me.local_rank == 0;

	if (!backend)
		backend = env_or("DDP_BACKEND", "");
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	if (!*backend || !strcmp(backend, "auto"))
		backend = cvd && *cvd ? "nccl" : "gloo";
	if (strcmp(backend, "nccl") && strcmp(backend, "gloo")) {
		fprintf(stderr, "ddp-check: backend '%s': expected nccl or gloo\n", backend);
		return 2;
	}
	me.backend = backend;
	/* Task 0 asks the controller while the others join: before any thread
	 * (CUDA's, the store's) exists, since the query forks. */
	struct ck_slurm_query sq = { 0 };
	if (me.id == 0)
		ck_slurm_ask(&sq, getenv("SLURM_JOB_ID"));
	char err[DDPENV_ERRLEN];
	const char *ma = getenv("MASTER_ADDR"), *mp = getenv("MASTER_PORT");
	if (ma && *ma) {
		struct ddpenv_addr a[4];
		if (ddpenv_addr_parse(ma, &me.head) == 0) {
			me.head_ok = 1;
		} else if (ddpenv_sys_lookup(NULL, ma, a, 4, err, sizeof(err)) > 0) {
			me.head = a[0];
			me.head_ok = 1;
		} else {
			snprintf(me.r.head_err, sizeof(me.r.head_err), "MASTER_ADDR=%s does not resolve", ma);
		}
	}
	ck_self_gpus(&me);
	if (!strcmp(backend, "nccl")) {
		/* For NCCL, the GPU as CUDA sees it under this task's
		 * CUDA_VISIBLE_DEVICES is the truth. */
		int dev, count;
		char busid[DDPENV_BUSIDLEN];
		if (ck_nccl_load(err, sizeof(err)) < 0 ||
		    ck_nccl_device(me.local_rank, &dev, &count, busid, sizeof(busid), err, sizeof(err)) < 0) {
			/* Reported with the rest; the other checks still run. */
			snprintf(me.r.backend_err, sizeof(me.r.backend_err), "%s", err);
			fprintf(stderr, "ddp-check: task %d (%s): FAIL coll.backend: %s\n", me.id, me.r.host, err);
		} else {
			snprintf(me.r.gpu, sizeof(me.r.gpu), "%s", busid);
			me.r.visible = count;
			me.r.nccl_version = ck_nccl_version();
			snprintf(me.r.gpu_from, sizeof(me.r.gpu_from), "CUDA device %d", dev);
		}
	}
	ck_self_iface(&me);
	ck_self_binding(&me);
	ck_self_limits(&me);
	ck_self_nccl_env(&me);
	/* only NCCL keeps segments there (a bounded query of logind, a 4 MiB
	 * file made and removed) */
	if (!strcmp(backend, "nccl")) {
		ck_self_shm(&me);
	} else {
		me.r.shm_size = me.r.shm_free = -1;
		me.r.removeipc = -1;
	}

	long port;
	if (!ma || !*ma || !mp || parse_int(mp, 1, 65535, &port) < 0) {
		snprintf(err, sizeof(err), "MASTER_ADDR='%s' MASTER_PORT='%s': the rendezvous needs both "
			 "(a port 1..65535); run it with srun --ddp", ma ? ma : "", mp ? mp : "");
		local_fail(&me, "rdzv.join", err, json);
		slurm_drop(&sq);
		return 1;
	}

	/* A listener for this node's probes, on the address peers will use. */
	struct ck_listener lis = { .fd = -1 };
	if (me.prober && me.r.ifaddr[0] && ck_listen_start(&lis, me.r.ifaddr, me.r.host, err, sizeof(err)) == 0)
		snprintf(me.r.probe, sizeof(me.r.probe), "%s", lis.endpoint);

	struct ddpenv_store *s = NULL;
	struct ddpenv_store_opts so = { ma, (int)port, me.id, me.n, o.timeout_s * 1000,
					getenv("DDP_RDZV_TOKEN"), log_refused, NULL };
	if (ddpenv_store_open(&s, &so, err, sizeof(err)) < 0) {
		ck_listen_stop(&lis);
		local_fail(&me, "rdzv.join", err, json);
		slurm_drop(&sq);
		return 1;
	}
	me.r.joined_s = ck_task_age();

	char *rec = malloc(RECLEN);
	int len = rec ? ck_rank_encode(&me.r, rec, RECLEN) : -1;
	if (len < 0 || publish(s, "rank", me.id, rec, (size_t)len, err, sizeof(err)) < 0) {
		local_fail(&me, "rdzv.join", len < 0 ? "record too large" : err, json);
		ddpenv_store_close_within(s, 1000);
		ck_listen_stop(&lis);
		free(rec);
		slurm_drop(&sq);
		return 1;
	}

	struct ck_world w = { .backend = backend, .n = me.n, .step_nodes = me.step_nodes, .opts = o };
	int rc = 0, *probers = NULL;
	char *plan = NULL;
	w.nsizes = ck_sizes(&o, w.sizes, CK_MAX_SIZES);
	double deadline = ck_mono() + o.timeout_s;
	void *v2;
	size_t l2;
	/* The others wait on task 0 for as long as it may wait on them. */
	int wait_ms = (o.timeout_s * 3 + 30) * 1000;

	if (me.id == 0) {
		w.ranks = calloc((size_t)me.n, sizeof(*w.ranks));
		w.probes = calloc((size_t)me.n, sizeof(*w.probes));
		w.colls = calloc((size_t)me.n, sizeof(*w.colls));
		w.gone = calloc((size_t)me.n, 1);
		probers = calloc((size_t)me.n, sizeof(int));
		if (!w.ranks || !w.probes || !w.colls || !w.gone || !probers) {
			local_fail(&me, "ddp-check", "out of memory", json);
			ddpenv_store_close_within(s, 1000);
			ck_listen_stop(&lis);
			rc = 1;
			goto out;
		}
		if (gather(s, "rank", me.n, me.n, deadline, w.gone, got_rank, &w, err, sizeof(err)) < 0)
			goto store_failed;
		pthread_mutex_lock(&refused_mu);
		snprintf(w.refused, sizeof(w.refused), "%s", refused);
		pthread_mutex_unlock(&refused_mu);
		/* A line per node: "id \t host \t endpoint \t head" */
		size_t cap = (size_t)me.n * (CK_HOST + 112) + 1;
		plan = malloc(cap);
		if (!plan) {
			snprintf(err, sizeof(err), "out of memory for the probe plan of %d tasks", me.n);
			goto store_failed;
		}
		size_t pl = make_plan(&w, plan, cap, probers);
		if (ddpenv_store_set(s, "ck/plan", plan, pl, err, sizeof(err)) < 0)
			goto store_failed;
	} else if (ddpenv_store_get(s, "ck/plan", wait_ms, &v2, &l2, err, sizeof(err)) < 0) {
		goto store_failed;
	} else {
		plan = v2;   /* NUL-terminated by the store client */
	}

	/* Probers: reach every other node's listener. */
	{
		struct ck_target *t = calloc((size_t)me.n + 1, sizeof(*t));
		size_t nt = 0;
		int mine = 0, nprobers = 0;
		for (const char *line = plan; t && *line;) {
			int id, head;
			char node[CK_HOST], ep[80];
			if (sscanf(line, "%d\t%63[^\t]\t%79[^\t]\t%d", &id, node, ep, &head) == 4) {
				nprobers++;
				if (id == me.id)
					mine = 1;
				else if ((size_t)nt < (size_t)me.n) {
					snprintf(t[nt].node, sizeof(t[nt].node), "%s", node);
					snprintf(t[nt].addr, sizeof(t[nt].addr), "%s", ep);
					t[nt].head = head;
					nt++;
				}
			}
			const char *nl = strchr(line, '\n');
			line = nl ? nl + 1 : line + strlen(line);
		}
		if (mine) {
			struct ck_probe pr;
			if (ck_probe_run(t, nt, o.probe_ms, &pr) == 0) {
				/* a peer line is at most ~400 bytes */
				size_t pcap = (nt + 4) * 512;
				char *pb = malloc(pcap);
				int pbl = pb ? ck_probe_encode(&pr, pb, pcap) : -1;
				if (pbl >= 0 && publish(s, "probe", me.id, pb, (size_t)pbl, err, sizeof(err)) < 0) {
					free(pb);
					ck_probe_free(&pr);
					free(t);
					goto store_failed;
				}
				free(pb);
			}
			ck_probe_free(&pr);
		}
		free(t);
		if (me.id == 0) {
			/* The probers report within about probe-timeout per batch. */
			double pd = ck_mono() + (double)o.probe_ms / 1000 * ((me.n + 127) / 128 + 2) + 5;
			if (gather(s, "probe", me.n, nprobers, pd, NULL, got_probe, &w, err, sizeof(err)) < 0)
				goto store_failed;
		}
	}

	/* Task 0 decides whether the collectives can work; everyone follows. */
	int go = 0;
	if (me.id == 0) {
		int ok;
		/* the controller has had the whole set-up to answer */
		ck_slurm_answer(&sq, sq.started + (o.timeout_s < SLURM_WAIT_S ? o.timeout_s : SLURM_WAIT_S),
				&w.slurm);
		ck_eval_setup(&w);
		ok = ck_coll_safe(&w, w.coll_skip, sizeof(w.coll_skip));
		snprintf(rec, RECLEN, "%d", ok);
		if (ddpenv_store_set(s, "ck/go", rec, strlen(rec), err, sizeof(err)) < 0)
			goto store_failed;
		go = ok;
	} else {
		if (ddpenv_store_get(s, "ck/go", wait_ms, &v2, &l2, err, sizeof(err)) < 0)
			goto store_failed;
		go = l2 > 0 && ((char *)v2)[0] == '1';
		free(v2);
	}
	ck_listen_stop(&lis);

	if (go) {
		struct ck_coll mine;
		ck_run_colls(&me, s, &o, w.sizes, w.nsizes, &mine);
		if (!mine.ok)
			fprintf(stderr, "ddp-check: task %d (%s): FAIL coll.allreduce: %s\n", me.id, me.r.host,
				mine.msg);
		int cl = ck_coll_encode(&mine, rec, RECLEN);
		if (cl < 0 || publish(s, "coll", me.id, rec, (size_t)cl, err, sizeof(err)) < 0)
			goto store_failed;
		if (!mine.ok)
			rc = 1;
		if (me.id == 0) {
			w.coll_ran = 1;
			if (gather(s, "coll", me.n, me.n, ck_mono() + o.timeout_s, w.gone, got_coll, &w, err,
				   sizeof(err)) < 0)
				goto store_failed;
		}
	}

	if (me.id == 0) {
		ck_eval_coll(&w);
		if (json)
			ck_report_json(&w, stdout);
		else
			ck_report_text(&w, stdout);
		rc = ck_exit_code(&w);
		snprintf(rec, RECLEN, "%d", rc);
		ddpenv_store_set(s, "ck/done", rec, strlen(rec), err, sizeof(err));
		int missing = 0;
		for (int i = 0; i < me.n; i++)
			missing += !w.ranks[i].joined;
		ddpenv_store_close_within(s, missing ? 3000 : o.timeout_s * 1000);
	} else {
		if (ddpenv_store_get(s, "ck/done", wait_ms, &v2, &l2, err, sizeof(err)) == 0)
			free(v2);
		ddpenv_store_close(s);
	}
	goto out;

store_failed:
	ck_listen_stop(&lis);
	if (me.id == 0)
		fprintf(stderr, "ddp-check: task 0 (%s): the rendezvous failed midway: %s\n", me.r.host, err);
	else
		fprintf(stderr, "ddp-check: task %d (%s): FAIL rdzv: lost task 0's rendezvous (task 0 died, "
			"or its node is unreachable): %s\n", me.id, me.r.host, err);
	ddpenv_store_close_within(s, 1000);
	rc = 1;
out:
	slurm_drop(&sq);
	if (w.probes)
		for (int i = 0; i < me.n; i++)
			ck_probe_free(&w.probes[i]);
	free(w.ranks);
	free(w.probes);
	free(w.colls);
	free(w.gone);
	free(w.res);
	free(probers);
	free(plan);
	free(rec);
	return rc;
}
