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

#include "ddpenv.h"

extern char **environ;

/* Slurm's configuration through libslurm (22.05); only used as a fallback
 * when the head's name resolves to loopback. */
extern char *slurm_conf_get_address(const char *node_name);
extern void slurm_xfree(void **p);

static int nodeaddr(void *ctx, const char *node, char *out, size_t len)
{
	const char *conf = getenv("SLURM_CONF");
	char *a;
	int rv = -1;

	(void)ctx;
	/* libslurm exits on a missing configuration: look first. */
	if (access(conf ? conf : "/etc/slurm/slurm.conf", R_OK) != 0)
		return -1;
	a = slurm_conf_get_address(node);
	if (a && strlen(a) < len) {
		strcpy(out, a);
		rv = 0;
	}
	if (a)
		slurm_xfree((void **)&a);
	return rv;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ddp-env [--explain] [--backend=nccl|gloo|auto]\n"
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "explain", no_argument, NULL, 'e' },
		{ "backend", required_argument, NULL, 'b' },
		{ "head-from", required_argument, NULL, 'H' },
		{ "repeat", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *backend_arg = NULL, *head_from = NULL;
	long repeat = 0;
	char *end;
	enum ddpenv_backend backend;
	struct ddpenv_env env;
	struct ddpenv_sys sys = ddpenv_sys_default;
	struct ddpenv_node node;
	struct ddpenv_vars vars;
	char err[DDPENV_ERRLEN];
	int explain = 0, c, rv = 1;

	while ((c = getopt_long(argc, argv, "eb:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'e': explain = 1; break;
		case 'b': backend_arg = optarg; break;
		case 'H': head_from = optarg; break;
		case 'R':
			errno = 0;
			repeat = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || repeat < 1 || repeat > 100000000) {
				fprintf(stderr, "ddp-env: --repeat=%s: expected a count 1-100000000\n",
					optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("ddp-env %s\n", DDPENV_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ddp-env: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (!backend_arg)
		backend_arg = getenv("SLURM_SPANK__SLURM_SPANK_OPTION_ddp_ddp");
	if (backend_arg && !*backend_arg)
		backend_arg = NULL; /* a bare --ddp */
	if (!backend_arg)
		backend_arg = getenv("DDP_BACKEND");
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
	sys.nodeaddr = nodeaddr;
	sys.lookup = counting_lookup;
	double t0 = now_s();
	for (long i = 0; i < (repeat ? repeat : 1); i++)
		if (ddpenv_node_resolve(&env, backend, &sys, &node, err, sizeof(err)) < 0 ||
		    ddpenv_task_vars(&node, &env, &vars, err, sizeof(err)) < 0) {
			fprintf(stderr, "ddp-env: %s\n", err);
			goto out;
		}
	if (repeat)
		printf("# %ld resolutions: %.2f us each, %.2f name lookups each, head %s\n", repeat,
		       (now_s() - t0) * 1e6 / (double)repeat, (double)lookups / (double)repeat,
		       node.step.head);
	for (size_t i = 0; i < vars.n; i++) {
		const struct ddpenv_var *v = &vars.v[i];
		if (explain) {
			printf("%-27s %-16s %s%s\n", v->key, v->value,
			       v->user ? "[user] " : "", v->how);
		} else {
			printf("export %s=", v->key);
			put_quoted(v->value);
			putchar('\n');
		}
	}
	rv = 0;
out:
	ddpenv_env_free(&env);
	return rv;
}
