/* ddp-check's command line (opts.h). */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: srun --ddp=nccl|gloo [srun options] ddp-check [options]\n"
		"\n"
		"Checks the distributed-training set-up of the step it runs in: the env://\n"
		"contract on every task, the rendezvous, each node's interface, reachability\n"
		"between nodes, clock skew, CPU and GPU binding, an exact all-reduce, the\n"
		"bandwidth of all-reduce, all-gather, reduce-scatter and all-to-all (nccl-tests'\n"
		"columns, every size's data checked), and each pair of nodes' link.  Task 0\n"
		"prints the report.\n"
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
		"      --baseline=FILE     compare the sweep's busbw with a recorded healthy run\n"
		"                          (this program's --json report): coll.baseline\n"
		"      --min-baseline=PCT  FAIL a size below PCT%% of the baseline's (default 80)\n"
		"      --pair-bytes=SIZE   each node pair's exchange, each way (default 16M;\n"
		"                          0: no pairs): net.pairs names a slow node or link\n"
		"      --min-pair=PCT      FAIL a pair below PCT%% of the best pair (default 50)\n"
		"      --h2d-bytes=SIZE    each task's copies from pinned memory to its GPU\n"
		"                          (default 64M; 0: none): hw.h2d\n"
		"      --min-h2d=PCT       FAIL a GPU below PCT%% of its PCIe link (default 50)\n"
		"      --p2p-bytes=SIZE    each copy between two GPUs of a node (default 64M;\n"
		"                          0: none): gpu.p2p_bw\n"
		"      --min-p2p=PCT       FAIL a GPU pair below PCT%% of its node's best pair\n"
		"                          (default 50)\n"
		"      --backend=nccl|gloo the collective library (default: DDP_BACKEND)\n"
		"      --json              the report as one JSON object\n"
		"      --node              this node alone, no srun or peers (Slurm's\n"
		"                          HealthCheckProgram, a prolog): its GPUs' and NICs'\n"
		"                          PCIe links and its RDMA ports\n"
		"      --drain             with --node: a failure drains the node (scontrol)\n"
		"  -h, --help              this text\n"
		"  -V, --version           the version\n"
		"\n"
		"SIZE takes K, M and G suffixes (powers of 1024).  Exit status: 0 every check\n"
		"OK or WARN, 1 a check FAILED, 2 a usage or set-up error.\n");
}

static void version(void)
{
#ifdef HAVE_NCCL
	printf("ddp-check %s (NCCL path built; libnccl and libcudart are loaded at run time)\n",
	       DDPENV_VERSION);
#else
	printf("ddp-check %s (gloo only: built without CUDA and NCCL headers)\n", DDPENV_VERSION);
#endif
}

/* The numeric options: where each goes in struct ck_opts, and its bounds. */
enum kind { K_SIZE, K_INT, K_REAL };

struct numopt {
	const char *name;
	int key;
	enum kind kind;
	long lo, hi;                     /* K_INT */
	const char *unit;                /* K_INT's, in the message; NULL: none */
	size_t off;
};

#define AT(f) offsetof(struct ck_opts, f)
static const struct numopt numopts[] = {
	{ "minbytes", 'b', K_SIZE, 0, 0, NULL, AT(min_bytes) },
	{ "maxbytes", 'e', K_SIZE, 0, 0, NULL, AT(max_bytes) },
	{ "stepfactor", 'f', K_INT, 2, 1024, NULL, AT(step_factor) },
	{ "iters", 'n', K_INT, 1, 100000, NULL, AT(iters) },
	{ "warmup", 'w', K_INT, 0, 100000, NULL, AT(warmup) },
	{ "min-busbw", 'B', K_REAL, 0, 0, NULL, AT(min_busbw) },
	{ "max-skew", 'S', K_REAL, 0, 0, NULL, AT(max_skew_ms) },
	{ "probe-timeout", 'P', K_INT, 1, 600000, "milliseconds", AT(probe_ms) },
	{ "timeout", 'T', K_INT, 1, 86400, "seconds", AT(timeout_s) },
	{ "min-kill-wait", 'K', K_INT, 0, 65533, "seconds", AT(min_kill_wait) },
	{ "min-baseline", 'M', K_INT, 1, 100, "percent", AT(min_baseline) },
	{ "pair-bytes", 'p', K_SIZE, 0, 0, NULL, AT(pair_bytes) },
	{ "min-pair", 'm', K_INT, 1, 100, "percent", AT(min_pair) },
	{ "h2d-bytes", 'H', K_SIZE, 0, 0, NULL, AT(h2d_bytes) },
	{ "min-h2d", 'X', K_INT, 1, 100, "percent", AT(min_h2d) },
	{ "p2p-bytes", 'Y', K_SIZE, 0, 0, NULL, AT(p2p_bytes) },
	{ "min-p2p", 'Z', K_INT, 1, 100, "percent", AT(min_p2p) },
};
#undef AT
#define NNUM (sizeof(numopts) / sizeof(numopts[0]))

int ck_parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
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

static int parse_real(const char *s, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(s, &end);
	if (end == s || *end || errno || !(d >= 0) || d > 1e9)
		return -1;
	*out = d;
	return 0;
}

/* One numeric option's value into o: 0, else -1 said on stderr. */
static int set_num(const struct numopt *n, const char *arg, struct ck_opts *o)
{
	char *field = (char *)o + n->off;
	long v;

	switch (n->kind) {
	case K_SIZE:
		if (parse_size(arg, (size_t *)(void *)field) == 0)
			return 0;
		fprintf(stderr, "ddp-check: --%s '%s': expected a size like 8, 64K, 256M (at most 16G)\n",
			n->name, arg);
		return -1;
	case K_REAL:
		if (parse_real(arg, (double *)(void *)field) == 0)
			return 0;
		fprintf(stderr, "ddp-check: --%s '%s': expected a non-negative number\n", n->name, arg);
		return -1;
	case K_INT:
		if (ck_parse_int(arg, n->lo, n->hi, &v) == 0) {
			*(int *)(void *)field = (int)v;
			return 0;
		}
		fprintf(stderr, "ddp-check: --%s '%s': expected %ld..%ld%s%s\n", n->name, arg, n->lo, n->hi,
			n->unit ? " " : "", n->unit ? n->unit : "");
		return -1;
	}
	return -1;
}

int ck_cli_parse(int argc, char **argv, struct ck_cli *cli)
{
	struct option lo[NNUM + 8];
	size_t k = 0;
	int ch;

	for (size_t i = 0; i < NNUM; i++)
		lo[k++] = (struct option){ numopts[i].name, required_argument, NULL, numopts[i].key };
	lo[k++] = (struct option){ "backend", required_argument, NULL, 'k' };
	lo[k++] = (struct option){ "baseline", required_argument, NULL, 'L' };
	lo[k++] = (struct option){ "json", no_argument, NULL, 'j' };
	lo[k++] = (struct option){ "node", no_argument, NULL, 'N' };
	lo[k++] = (struct option){ "drain", no_argument, NULL, 'D' };
	lo[k++] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[k++] = (struct option){ "version", no_argument, NULL, 'V' };
	lo[k] = (struct option){ 0 };

	while ((ch = getopt_long(argc, argv, "b:e:f:n:w:hV", lo, NULL)) != -1) {
		const struct numopt *n = NULL;
		for (size_t i = 0; i < NNUM && !n; i++)
			if (numopts[i].key == ch)
				n = &numopts[i];
		if (n) {
			if (set_num(n, optarg, &cli->o) < 0)
				return 2;
			continue;
		}
		switch (ch) {
		case 'k':
			cli->backend = optarg;
			break;
		case 'L':
			cli->o.baseline = optarg;
			break;
		case 'j':
			cli->json = 1;
			break;
		case 'N':
			cli->node = 1;
			break;
		case 'D':
			cli->drain = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			version();
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
	if (cli->drain && !cli->node) {
		fprintf(stderr, "ddp-check: --drain: only with --node (a step's tasks drain nothing)\n");
		return 2;
	}
	if (cli->o.min_bytes > cli->o.max_bytes && cli->o.max_bytes) {
		fprintf(stderr, "ddp-check: --minbytes %zu is larger than --maxbytes %zu\n", cli->o.min_bytes,
			cli->o.max_bytes);
		return 2;
	}
	return -1;
}
