/*
 * ddp-env: print the --ddp environment for the current Slurm task.
 *
 *   srun bash -c 'eval "$(ddp-env)"; exec python3 train.py'
 *   srun ddp-env --explain
 */
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "ddpenv.h"

extern char **environ;

/* Slurm's NodeAddr through libslurm, only as a fallback when the head's
 * name resolves to loopback.  libslurm is initialised first (from 23.02.1
 * a call that needs its configuration before slurm_init() is fatal), once,
 * and only with a configuration to read: slurm_init() exits without one. */
static int nodeaddr(void *ctx, const char *node, char *out, size_t len)
{
	static int inited;
	const char *conf = getenv("SLURM_CONF");

	if (!inited) {
		if (access(conf ? conf : "/etc/slurm/slurm.conf", R_OK) != 0)
			return -1;
		slurm_init(conf);
		inited = 1;
	}
	return ddpenv_slurm_nodeaddr(ctx, node, out, len);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddp-env [--explain] [--backend=nccl|gloo|auto] [--config=PATH]\n"
		"               [--bind=auto|none|strict] [--topology=FILE.xml]\n"
		"       ddp-env [--topology=FILE.xml] --tasks=N [--gpus=0,1,..] [--allowed=CPUS]\n"
		"       ddp-env --check-config [PATH]\n"
		"\n"
		"Print the distributed-training environment of this Slurm task\n"
		"(what srun --ddp sets) as shell export lines:\n"
		"  srun bash -c 'eval \"$(ddp-env)\"; exec python3 train.py'\n"
		"\n"
		"  -e, --explain        print each value with where it came from\n"
		"  -b, --backend=NAME   nccl, gloo or auto (default: the --ddp value\n"
		"                       of the job, else auto)\n"
		"      --head-from=SRC  where the head's address comes from: auto (the\n"
		"                       name, then Slurm's NodeAddr), name or nodeaddr\n"
		"                       (default: $DDP_HEAD_FROM, else auto)\n"
		"      --repeat=N       resolve N times and first print the time per\n"
		"                       resolution and the name lookups it made\n"
		"                       (bench/resolve_scale.sh)\n"
		"  -c, --config=PATH    the site configuration (default: $DDP_CONFIG,\n"
		"                       which the plugin sets, else " DDPENV_CONFIG_PATH ")\n"
		"      --bind=POLICY    auto, none or strict (default: the job's\n"
		"                       --ddp-bind, else DDP_BIND, else the config's bind)\n"
		"  -t, --topology=FILE  plan the binding on an hwloc XML export\n"
		"                       (lstopo --of xml) instead of this machine\n"
		"      --tasks=N        print only the binding plan for N tasks on one\n"
		"                       node (of this machine, or of --topology)\n"
		"      --gpus=LIST      the step's GRES GPU indices (outside a step)\n"
		"      --allowed=CPUS   the CPUs Slurm allows (default: the topology's)\n"
		"      --nvidia-gpus=DIR  the NVIDIA driver's GPU list: each /dev/nvidiaN's\n"
		"                       bus id, and the GPUs it excludes (default:\n"
		"                       " DDPENV_NVIDIA_GPUS " of this machine; none for\n"
		"                       --topology)\n"
		"      --gres-order=ORDER  how Slurm numbers the node's GPUs: bus (its GPU k\n"
		"                       is the k-th by PCI bus id: AutoDetect=nvml) or minor\n"
		"                       (the k-th /dev/nvidiaN: gres.conf File=/dev/nvidia[0-N];\n"
		"                       needs the driver's list) (default: the config's\n"
		"                       gres_order, else bus)\n"
		"      --check-config [PATH]\n"
		"                       validate a ddp.yaml before deploying it and print\n"
		"                       the settings it gives (exit 0 valid, 1 not)\n"
		"  -h, --help           this help\n"
		"  -V, --version        print the version\n");
}

/* Counts the name lookups a resolution makes (--repeat). */
static unsigned long lookups;

static int counting_lookup(void *ctx, const char *name, struct ddpenv_addr *out, size_t max,
			   char *err, size_t errlen)
{
	lookups++;
	return ddpenv_sys_lookup(ctx, name, out, max, err, errlen);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void put_quoted(const char *s)
{
	putchar('\'');
	for (; *s; s++) {
		if (*s == '\'')
			fputs("'\\''", stdout);
		else
			putchar(*s);
	}
	putchar('\'');
}

/* The plugin's token, for --explain to say there is one (never printed:
 * eval "$(ddp-env)" leaves the task's own in place). */
static int set_token(struct ddpenv_node *node, const struct ddpenv_env *env)
{
	const char *t = ddpenv_env_get(env, "DDP_RDZV_TOKEN");

	if (t && ddpenv_env_get(env, DDPENV_MARKER) && strlen(t) == DDPENV_TOKEN_LEN)
		snprintf(node->token, sizeof(node->token), "%s", t);
	return 0;
}

static void print_settings(const char *title, const struct ddpenv_settings *s)
{
	char buf[2048];
	size_t l;

	printf("%s\n", title);
	for (int k = 0; k < DDPENV_SET_COUNT; k++) {
		buf[0] = '\0';
		l = 0;
		switch (k) {
		case DDPENV_SET_DEFAULT_BACKEND: snprintf(buf, sizeof(buf), "%s", ddpenv_backend_name(s->default_backend)); break;
		case DDPENV_SET_ALLOWED_BACKENDS:
			snprintf(buf, sizeof(buf), "[%s%s%s]", s->allowed_backends & 1u << DDPENV_BACKEND_NCCL ? "nccl" : "",
				 (s->allowed_backends & 6u) == 6u ? ", " : "",
				 s->allowed_backends & 1u << DDPENV_BACKEND_GLOO ? "gloo" : "");
			break;
		case DDPENV_SET_PORT_RANGE: snprintf(buf, sizeof(buf), "%u-%u", s->port_lo, s->port_hi); break;
		case DDPENV_SET_NETWORK_CIDRS:
			l += (size_t)snprintf(buf + l, sizeof(buf) - l, "[");
			for (size_t i = 0; i < s->ncidrs; i++) {
				char a[DDPENV_ADDRSTRLEN] = "?";
				ddpenv_addr_format(&s->cidrs[i].addr, a, sizeof(a));
				l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%s/%u", i ? ", " : "", a, s->cidrs[i].prefix);
			}
			snprintf(buf + l, sizeof(buf) - l, "]");
			break;
		case DDPENV_SET_NETWORK_INCLUDE:
		case DDPENV_SET_NETWORK_EXCLUDE: {
			const char (*p)[DDPENV_CFG_PATLEN] = k == DDPENV_SET_NETWORK_INCLUDE ? s->include : s->exclude;
			size_t n = k == DDPENV_SET_NETWORK_INCLUDE ? s->ninclude : s->nexclude;
			l += (size_t)snprintf(buf + l, sizeof(buf) - l, "[");
			for (size_t i = 0; i < n; i++)
				l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%s", i ? ", " : "", p[i]);
			snprintf(buf + l, sizeof(buf) - l, "]");
			break;
		}
		case DDPENV_SET_HEAD_FROM: snprintf(buf, sizeof(buf), "%s", ddpenv_head_from_name(s->head_from)); break;
		case DDPENV_SET_OMP:
			if (s->omp == DDPENV_OMP_FIXED)
				snprintf(buf, sizeof(buf), "%u", s->omp_threads);
			else
				snprintf(buf, sizeof(buf), "%s", s->omp == DDPENV_OMP_AUTO ? "auto" : "none");
			break;
		case DDPENV_SET_ENV_NCCL:
		case DDPENV_SET_ENV_GLOO: {
			int w = k == DDPENV_SET_ENV_GLOO;
			l += (size_t)snprintf(buf + l, sizeof(buf) - l, "{");
			for (size_t i = 0; i < s->nenv[w] && l < sizeof(buf); i++)
				l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%s: %s", i ? ", " : "",
						      s->env[w][i].key, s->env[w][i].value);
			if (l < sizeof(buf))
				snprintf(buf + l, sizeof(buf) - l, "}");
			break;
		}
		case DDPENV_SET_RDZV_SECRET: snprintf(buf, sizeof(buf), "%s", s->rdzv_secret[0] ? s->rdzv_secret : "\"\" (no token)"); break;
		case DDPENV_SET_USER_OVERRIDES:
			l += (size_t)snprintf(buf + l, sizeof(buf) - l, "[");
			for (int j = 0; j < DDPENV_SET_COUNT; j++)
				if (s->user_overrides & 1u << j)
					l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%s", l > 1 ? ", " : "",
							      ddpenv_setting_name((enum ddpenv_setting)j));
			snprintf(buf + l, sizeof(buf) - l, "]");
			break;
		case DDPENV_SET_BIND: snprintf(buf, sizeof(buf), "%s", ddpenv_bind_name((enum ddpenv_bind)s->bind)); break;
		case DDPENV_SET_TOPOLOGY:
			snprintf(buf, sizeof(buf), "%s", s->topology[0] ? s->topology : "\"\" (discover)");
			break;
		case DDPENV_SET_BIND_NIC: snprintf(buf, sizeof(buf), "%s", s->bind_nic_hca ? "nccl_ib_hca" : "report"); break;
		case DDPENV_SET_NVIDIA_GPUS:
			snprintf(buf, sizeof(buf), "%s", s->nvidia_gpus[0] ? s->nvidia_gpus : "\"\" (not read)");
			break;
		case DDPENV_SET_GRES_ORDER:
			snprintf(buf, sizeof(buf), "%s", ddpenv_gres_order_name((enum ddpenv_gres_order)s->gres_order));
			break;
		case DDPENV_SET_TOPOLOGY_CACHE:
			snprintf(buf, sizeof(buf), "%s", s->topology_cache[0] ? s->topology_cache : "\"\" (discover at every step)");
			break;
		}
		printf("  %-18s %-32s %s\n", ddpenv_setting_name((enum ddpenv_setting)k), buf, s->where[k]);
	}
}

/* The plugin set this task's variables (DDP_STEP names this step). */
static int marked_here(void)
{
	const char *mark = getenv(DDPENV_MARKER), *job = getenv("SLURM_JOB_ID"), *stp = getenv("SLURM_STEP_ID");
	char want[64];

	snprintf(want, sizeof(want), "%s.%s", job ? job : "", stp ? stp : "");
	return mark && strcmp(mark, want) == 0;
}

static void print_plan(const struct ddpenv_bind_plan *p, const char *policy_how, int mine)
{
	printf("# binding: --ddp-bind=%s (%s); topology %s\n", ddpenv_bind_name(p->policy), policy_how,
	       p->topology);
	const char *theirs = mine >= 0 && marked_here() ? getenv("DDP_BIND_TOPOLOGY") : NULL;
	if (theirs && *theirs && strcmp(theirs, p->topology) != 0)
		printf("# the plugin's plan read the topology %.1024s\n", theirs);
	printf("# allowed CPUs: %s (%s)\n", p->allowed, p->allowed_how);
	printf("# cpu: %s%s\n", p->cpu ? "bound: " : "", p->cpu_how);
	printf("# gpu: %s%s\n", p->gpu && p->ngpus ? "bound: " : "", p->gpu_how);
	printf("# mem: %s%s\n", p->mem ? "bound: " : "", p->mem_how);
	if (p->gpu && p->ngpus && p->mig)
		printf("# CUDA_VISIBLE_DEVICES: each task its own MIG device (CUDA opens one per process)\n");
	else if (p->gpu && p->ngpus)
		printf("# CUDA_VISIBLE_DEVICES=%s%s\n", p->visible,
		       p->policy == DDPENV_BIND_STRICT ? " (strict: each task sees only its own)" : " for every task");
	printf("# %-10s %4s %-13s %4s %-8s %-26s %5s %-5s %s\n", "local_rank", "gpu", "busid", "numa", "nic",
	       "cpus", "cores", "mems", "notes");
	for (uint32_t i = 0; i < p->ntasks; i++) {
		const struct ddpenv_bind_task *t = &p->tasks[i];
		const struct ddpenv_bind_gpu *g = t->gpu >= 0 ? &p->gpus[t->gpu] : NULL;
		char gi[16] = "-", numa[16] = "-";
		if (g) {
			/* A MIG device by its GRES index; its UUID in the notes. */
			if (p->mig)
				snprintf(gi, sizeof(gi), "%u", g->index);
			else
				snprintf(gi, sizeof(gi), "%s", g->value);
			if (g->numa >= 0)
				snprintf(numa, sizeof(numa), "%d", g->numa);
		}
		/* A MIG device's UUID leads the notes: it is the task's CUDA_VISIBLE_DEVICES. */
		printf("# %-10u %4s %-13s %4s %-8s %-26s %5u %-5s %s%s%s%s%s%s\n", i, gi,
		       g && g->busid[0] ? g->busid : "-", numa, g && g->nic[0] ? g->nic : "-",
		       p->cpu ? t->cpus : "(left alone)", t->cores, p->mem ? t->mems : "-",
		       g && p->mig ? g->value : "", g && p->mig && (int)i == mine ? " " : "",
		       (int)i == mine ? "this task" : "",
		       g && p->cpu && t->near ? (i == (uint32_t)mine ? ", near its GPU" : "near its GPU") : "",
		       g && p->cpu && g->busid[0] && !t->near ? " NOT near its GPU" : "",
		       t->shared ? " shares CPUs" : "");
	}
}

/* --check-config: what an admin runs before deploying a ddp.yaml. */
static int check_config(const char *path)
{
	struct ddpenv_config cfg;
	struct ddpenv_settings eff;
	unsigned char secret[DDPENV_SECRET_MAX + 1];
	char err[DDPENV_ERRLEN], title[DDPENV_PATHLEN + 64];
	int rv = 1;

	ddpenv_config_init(&cfg);
	if (ddpenv_config_load(&cfg, path, 1, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		goto out;
	}
	ddpenv_config_effective(&cfg, NULL, NULL, &eff, err, sizeof(err));
	snprintf(title, sizeof(title), "# %s: valid; settings (value, where it comes from):", path);
	print_settings(title, &eff);
	for (size_t i = 0; i < cfg.nparts; i++) {
		if (ddpenv_config_effective(&cfg, cfg.parts[i].name, NULL, &eff, err, sizeof(err)) < 0)
			continue;
		snprintf(title, sizeof(title), "# partition %s:", cfg.parts[i].name);
		print_settings(title, &eff);
	}
	rv = 0;
	/* The secret of each section, when this user can check it. */
	for (size_t i = 0; i <= cfg.nparts; i++) {
		ddpenv_config_effective(&cfg, i ? cfg.parts[i - 1].name : NULL, NULL, &eff, err, sizeof(err));
		if (!eff.rdzv_secret[0])
			continue;
		if (geteuid() != 0) {
			printf("# rdzv_secret %s: not checked (needs root)\n", eff.rdzv_secret);
			continue;
		}
		if (ddpenv_secret_read(eff.rdzv_secret, secret, sizeof(secret), err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: %s (%s)\n", err, eff.where[DDPENV_SET_RDZV_SECRET]);
			rv = 1;
		}
		explicit_bzero(secret, sizeof(secret));
	}
out:
	ddpenv_config_free(&cfg);
	return rv;
}

/* The NVIDIA driver's GPU list into t, as the plugin does: dir
 * (--nvidia-gpus), else this machine's own, mine (the configured
 * nvidia_gpus; NULL for another machine's --topology, "" when the config
 * turns it off; a list that cannot be read there is a warning).  -1 with
 * err only when dir cannot be used. */
static int use_nvidia(struct ddpenv_topo *t, const char *dir, const char *mine, char *err,
		      size_t errlen)
{
	struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	char e[DDPENV_ERRLEN];
	if (!dir && (!mine || !*mine))
		return 0;
	int n = ddpenv_nvidia_gpus(dir ? dir : mine, nv, DDPENV_MAX_GPUS, e, sizeof(e));
	if (dir && n == 0)
		snprintf(e, sizeof(e), "--nvidia-gpus=%s: no GPU listed there (expected a directory per "
			 "GPU holding the driver's 'information' file, as in %s)", dir, DDPENV_NVIDIA_GPUS);
	if ((dir && n == 0) || n < 0 || ddpenv_topo_set_nvidia(t, nv, n > 0 ? (size_t)n : 0, e, sizeof(e)) < 0) {
		if (dir) {
			snprintf(err, errlen, "%s", e);
			return -1;
		}
		fprintf(stderr, "ddp-env: warning: GPU N taken for the N-th by bus id: %s\n", e);
	}
	return 0;
}

/* ddp-env --topology FILE.xml --tasks N [--gpus LIST]: the plan alone. */
static int plan_only(const char *path, const char *bind_arg, const char *tasks, const char *gpus,
		     const char *allowed, const char *nvidia, const char *order)
{
	struct ddpenv_env env;
	struct ddpenv_topo *t = NULL;
	struct ddpenv_bind_plan p;
	enum ddpenv_bind policy;
	char err[DDPENV_ERRLEN];
	int rv = 1;

	memset(&p, 0, sizeof(p));
	ddpenv_env_init(&env);
	if (ddpenv_bind_parse(bind_arg, &policy, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		rv = 2;
		goto out;
	}
	if (tasks && (!*tasks || strspn(tasks, "0123456789") != strlen(tasks))) {
		fprintf(stderr, "ddp-env: --tasks=%s: expected a task count 1-%d\n", tasks, DDPENV_MAX_LOCAL);
		rv = 2;
		goto out;
	}
	for (const char *q = gpus ? gpus : ""; *q; q++)
		if (!strchr("0123456789,", *q)) {
			fprintf(stderr, "ddp-env: --gpus=%s: expected GRES indices such as 0,1,2,3\n", gpus);
			rv = 2;
			goto out;
		}
	if (ddpenv_topo_load(path, !path, &t, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		goto out;
	}
	if (use_nvidia(t, nvidia, path ? NULL : DDPENV_NVIDIA_GPUS, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		rv = 2;
		goto out;
	}
	if (order) {
		enum ddpenv_gres_order o;
		if (ddpenv_gres_order_parse(order, &o, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: --gres-order=%s\n", err);
			rv = 2;
			goto out;
		}
		ddpenv_topo_set_gres_order(t, o);
	}
	/* By default: every GPU of the machine, one task each (or one task). */
	char all[DDPENV_VALLEN] = "", ntasks[16];
	if (!gpus) {
		size_t n = ddpenv_topo_gpu_count(t), l = 0;
		for (size_t i = 0; i < n && i < DDPENV_MAX_GPUS; i++)
			l += (size_t)snprintf(all + l, sizeof(all) - l, "%s%zu", i ? "," : "", i);
		gpus = all;
		if (!tasks) {
			snprintf(ntasks, sizeof(ntasks), "%zu", n ? n : 1);
			tasks = ntasks;
		}
	} else if (!tasks) {
		size_t n = *gpus ? 1 : 0;
		for (const char *q = gpus; *q; q++)
			n += *q == ',';
		snprintf(ntasks, sizeof(ntasks), "%zu", n ? n : 1);
		tasks = ntasks;
	}
	if (ddpenv_env_set(&env, "SLURM_NODEID", "0") < 0 ||
	    ddpenv_env_set(&env, "SLURM_STEP_TASKS_PER_NODE", tasks) < 0 ||
	    (gpus && *gpus && (ddpenv_env_set(&env, "SLURM_STEP_GPUS", gpus) < 0 ||
			       ddpenv_env_set(&env, "CUDA_VISIBLE_DEVICES", gpus) < 0))) {
		fprintf(stderr, "ddp-env: out of memory\n");
		goto out;
	}
	if (ddpenv_bind_plan(t, &env, policy, allowed, &p, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		goto out;
	}
	print_plan(&p, bind_arg ? "--bind" : "default", -1);
	rv = 0;
out:
	ddpenv_bind_plan_free(&p);
	ddpenv_topo_free(t);
	ddpenv_env_free(&env);
	return rv;
}

/* The command line.  The options that take a string land in a field of
 * their own (opt_fields); --explain, --check-config, --help and --version
 * are handled where they are parsed. */
struct cli {
	const char *backend, *head_from, *config, *bind, *topology, *tasks, *gpus, *allowed, *nvidia,
		*order, *repeat_s;
	long repeat;
	int explain, check;
};

#define AT(f) offsetof(struct cli, f)
static const struct {
	struct option opt;
	size_t field;
} opt_fields[] = {
	{ { "backend", required_argument, NULL, 'b' }, AT(backend) },
	{ { "head-from", required_argument, NULL, 'H' }, AT(head_from) },
	{ { "repeat", required_argument, NULL, 'R' }, AT(repeat_s) },
	{ { "config", required_argument, NULL, 'c' }, AT(config) },
	{ { "bind", required_argument, NULL, 'B' }, AT(bind) },
	{ { "topology", required_argument, NULL, 't' }, AT(topology) },
	{ { "tasks", required_argument, NULL, 'T' }, AT(tasks) },
	{ { "gpus", required_argument, NULL, 'G' }, AT(gpus) },
	{ { "allowed", required_argument, NULL, 'A' }, AT(allowed) },
	{ { "nvidia-gpus", required_argument, NULL, 'N' }, AT(nvidia) },
	{ { "gres-order", required_argument, NULL, 'O' }, AT(order) },
};
#undef AT
#define NFIELDS (sizeof(opt_fields) / sizeof(opt_fields[0]))

static void version(void)
{
	printf("ddp-env %s (built against Slurm %02d.%02d.%d)\n", DDPENV_VERSION,
	       SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER),
	       SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER));
}

/* -1: go on; else the exit status (after --help or --version, or a usage
 * error said on stderr). */
static int parse_cli(int argc, char **argv, struct cli *cli)
{
	struct option lo[NFIELDS + 5];
	size_t k = 0;
	int c;

	for (size_t i = 0; i < NFIELDS; i++)
		lo[k++] = opt_fields[i].opt;
	lo[k++] = (struct option){ "explain", no_argument, NULL, 'e' };
	lo[k++] = (struct option){ "check-config", optional_argument, NULL, 'C' };
	lo[k++] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[k++] = (struct option){ "version", no_argument, NULL, 'V' };
	lo[k] = (struct option){ NULL, 0, NULL, 0 };

	while ((c = getopt_long(argc, argv, "eb:c:t:hV", lo, NULL)) != -1) {
		size_t i = 0;
		while (i < NFIELDS && opt_fields[i].opt.val != c)
			i++;
		if (i < NFIELDS) {
			*(const char **)(void *)((char *)cli + opt_fields[i].field) = optarg;
			continue;
		}
		switch (c) {
		case 'e': cli->explain = 1; break;
		case 'C':
			cli->check = 1;
			if (optarg)
				cli->config = optarg;
			else if (optind < argc && argv[optind][0] != '-')
				cli->config = argv[optind++];
			break;
		case 'h': usage(stdout); return 0;
		case 'V': version(); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ddp-env: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (cli->repeat_s) {
		char *end;
		errno = 0;
		cli->repeat = strtol(cli->repeat_s, &end, 10);
		if (errno || end == cli->repeat_s || *end || cli->repeat < 1 || cli->repeat > 100000000) {
			fprintf(stderr, "ddp-env: --repeat=%s: expected a count 1-100000000\n", cli->repeat_s);
			return 2;
		}
	}
	return -1;
}

/* What a task's contract is made of, and what it holds afterwards. */
struct task {
	enum ddpenv_backend backend;
	const char *backend_from;        /* the plugin's reason, in a --ddp step */
	struct ddpenv_env env;
	struct ddpenv_config cfg;
	struct ddpenv_settings eff;
	struct ddpenv_topo *topo;
	struct ddpenv_bind_plan plan;
	int have_plan;
	char policy_how[DDPENV_HOWLEN];
	struct ddpenv_node node;
	struct ddpenv_vars vars;
	char err[DDPENV_ERRLEN];
};

/* --backend, else the job's --ddp value, else DDP_BACKEND (then with the
 * plugin's reason).  0, else 2 said. */
static int choose_backend(const struct cli *cli, struct task *t)
{
	const char *b = cli->backend;
	int from_env = 0;
	if (!b)
		b = getenv("SLURM_SPANK__SLURM_SPANK_OPTION_ddp_ddp");
	if (b && !*b)
		b = NULL; /* a bare --ddp */
	if (!b && (b = getenv("DDP_BACKEND")))
		from_env = 1;
	if (ddpenv_backend_parse(b, &t->backend, t->err, sizeof(t->err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", t->err);
		return 2;
	}
	/* In a task of a --ddp step DDP_BACKEND is the plugin's choice, and
	 * DDP_BACKEND_FROM its reason (a bare --ddp is not in the task's
	 * environment). */
	t->backend_from = from_env && marked_here() ? getenv("DDP_BACKEND_FROM") : NULL;
	return 0;
}

/* The environment with --head-from in it, and the settings of the
 * configuration for this job's partition.  0, else the exit status, said. */
static int load_settings(const struct cli *cli, struct task *t)
{
	if (ddpenv_env_from_envp(&t->env, environ) < 0) {
		fprintf(stderr, "ddp-env: out of memory reading the environment\n");
		return 1;
	}
	if (cli->head_from) {
		enum ddpenv_head_from f;
		if (ddpenv_head_from_parse(cli->head_from, &f, t->err, sizeof(t->err)) < 0) {
			fprintf(stderr, "ddp-env: --head-from: %s\n", t->err);
			return 2;
		}
		if (ddpenv_env_set(&t->env, "DDP_HEAD_FROM", cli->head_from) < 0) {
			fprintf(stderr, "ddp-env: out of memory\n");
			return 1;
		}
	}
	const char *cpath = cli->config ? cli->config : getenv("DDP_CONFIG");
	int rv = 0;
	ddpenv_config_init(&t->cfg);
	if (ddpenv_config_load(&t->cfg, cpath ? cpath : t->cfg.path, cpath != NULL, t->err, sizeof(t->err)) < 0 ||
	    ddpenv_config_effective(&t->cfg, getenv("SLURM_JOB_PARTITION"), &t->env, &t->eff, t->err,
				    sizeof(t->err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", t->err);
		rv = 1;
	}
	ddpenv_config_free(&t->cfg);
	return rv;
}

/* The binding policy: the plugin's choice (--ddp-bind or the config) in
 * this step's tasks, else --bind, else the config's; where it came from
 * into t->policy_how.  0, else 2 said. */
static int choose_policy(const struct cli *cli, struct task *t, enum ddpenv_bind *policy)
{
	const char *opt = marked_here() ? getenv("DDP_BIND_POLICY") : NULL;
	const char *from = getenv("DDP_BIND_FROM");
	const char *bind = cli->bind;
	*policy = (enum ddpenv_bind)t->eff.bind;
	snprintf(t->policy_how, sizeof(t->policy_how), "bind: %s", t->eff.where[DDPENV_SET_BIND]);
	if (opt && *opt) {
		bind = bind ? bind : opt;
		snprintf(t->policy_how, sizeof(t->policy_how), "%s", bind == opt ? (from ? from : "the plugin") : "--bind");
	} else if (bind) {
		snprintf(t->policy_how, sizeof(t->policy_how), "--bind");
	}
	if (bind && ddpenv_bind_parse(bind, policy, t->err, sizeof(t->err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", t->err);
		return 2;
	}
	return 0;
}

/* The binding plan, as the plugin made it on this node.  0 (a plan, or a
 * warning that there is none), else the exit status, said. */
static int plan_here(const struct cli *cli, struct task *t)
{
	enum ddpenv_bind policy;
	enum ddpenv_gres_order order = (enum ddpenv_gres_order)t->eff.gres_order;
	const char *tp = cli->topology ? cli->topology : t->eff.topology[0] ? t->eff.topology : NULL;
	int rv = choose_policy(cli, t, &policy);
	if (rv)
		return rv;
	if (cli->order && ddpenv_gres_order_parse(cli->order, &order, t->err, sizeof(t->err)) < 0) {
		fprintf(stderr, "ddp-env: --gres-order=%s\n", t->err);
		return 2;
	}
	if (!getenv("SLURM_NODEID"))
		return 0;   /* not a task: the contract says why */
	if (ddpenv_topo_load(tp, !cli->topology, &t->topo, t->err, sizeof(t->err)) < 0 ||
	    use_nvidia(t->topo, cli->nvidia, cli->topology ? NULL : t->eff.nvidia_gpus, t->err, sizeof(t->err)) < 0 ||
	    (ddpenv_topo_set_gres_order(t->topo, order), 0) ||
	    ddpenv_bind_plan(t->topo, &t->env, policy, cli->allowed, &t->plan, t->err, sizeof(t->err)) < 0) {
		if (cli->topology || policy == DDPENV_BIND_STRICT) {
			fprintf(stderr, "ddp-env: %s\n", t->err);
			return 1;
		}
		fprintf(stderr, "ddp-env: warning: no binding: %s\n", t->err);
		return 0;
	}
	t->have_plan = 1;
	return 0;
}

/* The contract, --repeat times (timed, its lookups counted).  0, else 1
 * said. */
static int resolve(const struct cli *cli, struct task *t)
{
	struct ddpenv_sys sys = ddpenv_sys_default;
	sys.nodeaddr = ddpenv_slurm_has_nodeaddr() ? nodeaddr : NULL;
	sys.lookup = counting_lookup;
	double t0 = now_s();
	for (long i = 0; i < (cli->repeat ? cli->repeat : 1); i++) {
		if (ddpenv_node_resolve(&t->env, t->backend, &t->eff, &sys, &t->node, t->err, sizeof(t->err)) < 0 ||
		    set_token(&t->node, &t->env) < 0) {
			fprintf(stderr, "ddp-env: %s\n", t->err);
			return 1;
		}
		if (t->backend_from && *t->backend_from)
			snprintf(t->node.backend_how, sizeof(t->node.backend_how), "%s", t->backend_from);
		t->node.plan = t->have_plan ? &t->plan : NULL;
		if (ddpenv_task_vars(&t->node, &t->env, &t->vars, t->err, sizeof(t->err)) < 0) {
			fprintf(stderr, "ddp-env: %s\n", t->err);
			return 1;
		}
	}
	if (cli->repeat)
		printf("# %ld resolutions: %.2f us each, %.2f name lookups each, head %s\n", cli->repeat,
		       (now_s() - t0) * 1e6 / (double)cli->repeat, (double)lookups / (double)cli->repeat,
		       t->node.step.head);
	return 0;
}

/* --explain's header: the configuration, the token, the plan. */
static void print_explain(const struct task *t)
{
	printf("# config: %s\n", t->cfg.from_file ? t->cfg.path :
	       "none found: built-in defaults (" DDPENV_CONFIG_PATH " is absent)");
	if (!t->node.token[0])
		printf("# rendezvous token: none: %s; any client that reaches MASTER_ADDR:MASTER_PORT can join the rendezvous\n",
		       t->eff.rdzv_secret[0] ? "rdzv_secret is configured but the plugin set no DDP_RDZV_TOKEN (not under srun --ddp?)" :
		       "no rdzv_secret configured");
	else
		printf("# rendezvous token: DDP_RDZV_TOKEN from rdzv_secret %s (%s)\n",
		       t->eff.rdzv_secret[0] ? t->eff.rdzv_secret : "?", t->eff.where[DDPENV_SET_RDZV_SECRET]);
	if (t->have_plan) {
		const char *lr = getenv("SLURM_LOCALID");
		print_plan(&t->plan, t->policy_how, lr ? atoi(lr) : -1);
	}
}

/* Each variable: an export line, or with --explain where it came from.
 * The token is never printed: output files are often world-readable, and
 * eval keeps the one the task has. */
static void print_vars(const struct ddpenv_vars *vars, int explain)
{
	for (size_t i = 0; i < vars->n; i++) {
		const struct ddpenv_var *v = &vars->v[i];
		int secret = strcmp(v->key, "DDP_RDZV_TOKEN") == 0;
		if (explain) {
			printf("%-31s %-16s %s%s\n", v->key, secret ? "(hidden)" : v->value,
			       v->user ? "[user] " : "", v->how);
		} else if (!secret) {
			printf("export %s=", v->key);
			put_quoted(v->value);
			putchar('\n');
		}
	}
}

/* The contract of this task, printed.  The exit status. */
static int task_env(const struct cli *cli)
{
	static struct task t;
	int rv = choose_backend(cli, &t);
	if (rv)
		return rv;
	ddpenv_env_init(&t.env);
	if (!(rv = load_settings(cli, &t)) && !(rv = plan_here(cli, &t)) && !(rv = resolve(cli, &t))) {
		if (cli->explain)
			print_explain(&t);
		print_vars(&t.vars, cli->explain);
	}
	ddpenv_bind_plan_free(&t.plan);
	ddpenv_topo_free(t.topo);
	ddpenv_env_free(&t.env);
	return rv;
}

int main(int argc, char **argv)
{
	struct cli cli = { 0 };
	int rv = parse_cli(argc, argv, &cli);
	if (rv >= 0)
		return rv;
	if (cli.check)
		return check_config(cli.config ? cli.config : DDPENV_CONFIG_PATH);
	if ((cli.gpus || cli.allowed) && !cli.tasks && !cli.topology) {
		fprintf(stderr, "ddp-env: --gpus and --allowed describe a step for --tasks=N or --topology=FILE: give one\n");
		return 2;
	}
	/* Outside a step, --topology (or --tasks) prints the plan alone. */
	if (cli.tasks || (cli.topology && !getenv("SLURM_STEP_ID") && !getenv("SLURM_STEPID")))
		return plan_only(cli.topology, cli.bind, cli.tasks, cli.gpus, cli.allowed, cli.nvidia, cli.order);
	return task_env(&cli);
}
