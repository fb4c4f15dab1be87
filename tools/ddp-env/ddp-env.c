/*
 * ddp-env: print the --ddp environment for the current Slurm task.
 *
 *   srun bash -c 'eval "$(ddp-env)"; exec python3 train.py'
 *   srun ddp-env --explain
 */
#include <errno.h>
#include <getopt.h>
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "explain", no_argument, NULL, 'e' },
		{ "backend", required_argument, NULL, 'b' },
		{ "head-from", required_argument, NULL, 'H' },
		{ "repeat", required_argument, NULL, 'R' },
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", optional_argument, NULL, 'C' },
		{ "bind", required_argument, NULL, 'B' },
		{ "topology", required_argument, NULL, 't' },
		{ "tasks", required_argument, NULL, 'T' },
		{ "gpus", required_argument, NULL, 'G' },
		{ "allowed", required_argument, NULL, 'A' },
		{ "nvidia-gpus", required_argument, NULL, 'N' },
		{ "gres-order", required_argument, NULL, 'O' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *backend_arg = NULL, *head_from = NULL, *config = NULL;
	const char *bind_arg = NULL, *topo_path = NULL, *tasks_arg = NULL, *gpus_arg = NULL,
		   *allowed_arg = NULL, *nvidia_arg = NULL, *order_arg = NULL, *repeat_arg = NULL;
	struct ddpenv_topo *topo = NULL;
	struct ddpenv_bind_plan plan;
	char policy_how[DDPENV_HOWLEN];
	int have_plan = 0;
	int check = 0;
	long repeat = 0;
	char *end;
	enum ddpenv_backend backend;
	struct ddpenv_env env;
	struct ddpenv_sys sys = ddpenv_sys_default;
	struct ddpenv_node node;
	struct ddpenv_vars vars;
	char err[DDPENV_ERRLEN];
	int explain = 0, c, rv = 1;

	memset(&plan, 0, sizeof(plan));
	while ((c = getopt_long(argc, argv, "eb:c:t:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'B': bind_arg = optarg; break;
		case 't': topo_path = optarg; break;
		case 'T': tasks_arg = optarg; break;
		case 'G': gpus_arg = optarg; break;
		case 'A': allowed_arg = optarg; break;
		case 'N': nvidia_arg = optarg; break;
		case 'O': order_arg = optarg; break;
		case 'c': config = optarg; break;
		case 'C':
			check = 1;
			if (optarg)
				config = optarg;
			else if (optind < argc && argv[optind][0] != '-')
				config = argv[optind++];
			break;
		case 'e': explain = 1; break;
		case 'b': backend_arg = optarg; break;
		case 'H': head_from = optarg; break;
		case 'R': repeat_arg = optarg; break;
		case 'h': usage(stdout); return 0;
		case 'V':
			printf("ddp-env %s (built against Slurm %02d.%02d.%d)\n", DDPENV_VERSION,
			       SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER), SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER),
			       SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER));
			return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ddp-env: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (repeat_arg) {
		errno = 0;
		repeat = strtol(repeat_arg, &end, 10);
		if (errno || end == repeat_arg || *end || repeat < 1 || repeat > 100000000) {
			fprintf(stderr, "ddp-env: --repeat=%s: expected a count 1-100000000\n", repeat_arg);
			return 2;
		}
	}
	if (check)
		return check_config(config ? config : DDPENV_CONFIG_PATH);
	if ((gpus_arg || allowed_arg) && !tasks_arg && !topo_path) {
		fprintf(stderr, "ddp-env: --gpus and --allowed describe a step for --tasks=N or --topology=FILE: give one\n");
		return 2;
	}
	/* Outside a step, --topology (or --tasks) prints the plan alone. */
	if (tasks_arg || (topo_path && !getenv("SLURM_STEP_ID") && !getenv("SLURM_STEPID")))
		return plan_only(topo_path, bind_arg, tasks_arg, gpus_arg, allowed_arg, nvidia_arg, order_arg);
	if (!backend_arg)
		backend_arg = getenv("SLURM_SPANK__SLURM_SPANK_OPTION_ddp_ddp");
	if (backend_arg && !*backend_arg)
		backend_arg = NULL; /* a bare --ddp */
	int backend_from_env = 0;
	if (!backend_arg && (backend_arg = getenv("DDP_BACKEND")))
		backend_from_env = 1;
	if (ddpenv_backend_parse(backend_arg, &backend, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		return 2;
	}

	ddpenv_env_init(&env);
	if (ddpenv_env_from_envp(&env, environ) < 0) {
		fprintf(stderr, "ddp-env: out of memory reading the environment\n");
		goto out;
	}
	if (head_from) {
		enum ddpenv_head_from f;
		if (ddpenv_head_from_parse(head_from, &f, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: --head-from: %s\n", err);
			rv = 2;
			goto out;
		}
		if (ddpenv_env_set(&env, "DDP_HEAD_FROM", head_from) < 0) {
			fprintf(stderr, "ddp-env: out of memory\n");
			goto out;
		}
	}
	struct ddpenv_config cfg;
	struct ddpenv_settings eff;
	const char *cpath = config ? config : getenv("DDP_CONFIG");
	ddpenv_config_init(&cfg);
	if (ddpenv_config_load(&cfg, cpath ? cpath : cfg.path, cpath != NULL, err, sizeof(err)) < 0 ||
	    ddpenv_config_effective(&cfg, getenv("SLURM_JOB_PARTITION"), &env, &eff, err,
				    sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		ddpenv_config_free(&cfg);
		goto out;
	}
	ddpenv_config_free(&cfg);

	/* The binding plan, as the plugin made it on this node. */
	{
		enum ddpenv_bind policy = (enum ddpenv_bind)eff.bind;
		/* The plugin's choice (--ddp-bind or the config), in this step's tasks. */
		const char *opt = getenv("DDP_BIND_POLICY");
		const char *from = getenv("DDP_BIND_FROM");
		if (!marked_here())
			opt = NULL;
		const char *tp = topo_path ? topo_path : eff.topology[0] ? eff.topology : NULL;
		snprintf(policy_how, sizeof(policy_how), "bind: %s", eff.where[DDPENV_SET_BIND]);
		if (opt && *opt) {
			bind_arg = bind_arg ? bind_arg : opt;
			snprintf(policy_how, sizeof(policy_how), "%s", bind_arg == opt ? (from ? from : "the plugin") : "--bind");
		} else if (bind_arg) {
			snprintf(policy_how, sizeof(policy_how), "--bind");
		}
		if (bind_arg && ddpenv_bind_parse(bind_arg, &policy, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: %s\n", err);
			rv = 2;
			goto out;
		}
		enum ddpenv_gres_order order = (enum ddpenv_gres_order)eff.gres_order;
		if (order_arg && ddpenv_gres_order_parse(order_arg, &order, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: --gres-order=%s\n", err);
			rv = 2;
			goto out;
		}
		if (!getenv("SLURM_NODEID")) {
			/* not a task: the contract below says why */
		} else if (ddpenv_topo_load(tp, !topo_path, &topo, err, sizeof(err)) < 0 ||
			   use_nvidia(topo, nvidia_arg, topo_path ? NULL : eff.nvidia_gpus, err, sizeof(err)) < 0 ||
			   (ddpenv_topo_set_gres_order(topo, order), 0) ||
			   ddpenv_bind_plan(topo, &env, policy, allowed_arg, &plan, err, sizeof(err)) < 0) {
			if (topo_path || policy == DDPENV_BIND_STRICT) {
				fprintf(stderr, "ddp-env: %s\n", err);
				goto out;
			}
			fprintf(stderr, "ddp-env: warning: no binding: %s\n", err);
		} else {
			have_plan = 1;
		}
	}
	sys.nodeaddr = ddpenv_slurm_has_nodeaddr() ? nodeaddr : NULL;
	sys.lookup = counting_lookup;
	double t0 = now_s();
	/* In a task of a --ddp step DDP_BACKEND is the plugin's choice, and
	 * DDP_BACKEND_FROM its reason (a bare --ddp is not in the task's
	 * environment). */
	const char *backend_from = backend_from_env && marked_here() ? getenv("DDP_BACKEND_FROM") : NULL;
	for (long i = 0; i < (repeat ? repeat : 1); i++) {
		if (ddpenv_node_resolve(&env, backend, &eff, &sys, &node, err, sizeof(err)) < 0 ||
		    set_token(&node, &env) < 0) {
			fprintf(stderr, "ddp-env: %s\n", err);
			goto out;
		}
		if (backend_from && *backend_from)
			snprintf(node.backend_how, sizeof(node.backend_how), "%s", backend_from);
		node.plan = have_plan ? &plan : NULL;
		if (ddpenv_task_vars(&node, &env, &vars, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: %s\n", err);
			goto out;
		}
	}
	if (repeat)
		printf("# %ld resolutions: %.2f us each, %.2f name lookups each, head %s\n", repeat,
		       (now_s() - t0) * 1e6 / (double)repeat, (double)lookups / (double)repeat,
		       node.step.head);
	if (explain) {
		printf("# config: %s\n", cfg.from_file ? cfg.path :
		       "none found: built-in defaults (" DDPENV_CONFIG_PATH " is absent)");
		if (!node.token[0])
			printf("# rendezvous token: none: %s; any client that reaches MASTER_ADDR:MASTER_PORT can join the rendezvous\n",
			       eff.rdzv_secret[0] ? "rdzv_secret is configured but the plugin set no DDP_RDZV_TOKEN (not under srun --ddp?)" :
			       "no rdzv_secret configured");
		else
			printf("# rendezvous token: DDP_RDZV_TOKEN from rdzv_secret %s (%s)\n",
			       eff.rdzv_secret[0] ? eff.rdzv_secret : "?", eff.where[DDPENV_SET_RDZV_SECRET]);
	}
	if (explain && have_plan) {
		const char *lr = getenv("SLURM_LOCALID");
		print_plan(&plan, policy_how, lr ? atoi(lr) : -1);
	}
	for (size_t i = 0; i < vars.n; i++) {
		const struct ddpenv_var *v = &vars.v[i];
		/* The token is never printed: output files are often
		 * world-readable.  eval keeps the one the task has. */
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
	rv = 0;
out:
	ddpenv_bind_plan_free(&plan);
	ddpenv_topo_free(topo);
	ddpenv_env_free(&env);
	return rv;
}
