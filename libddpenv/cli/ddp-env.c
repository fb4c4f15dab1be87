/*
 * ddp-env: print the --ddp environment for the current Slurm task.
 *
 *   srun bash -c 'eval "$(ddp-env)"; exec python3 train.py'
 *   srun ddp-env --explain
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
		"  -h, --help           this help\n"
		"  -V, --version        print the version\n");
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
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *backend_arg = NULL;
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
	sys.nodeaddr = nodeaddr;
	if (ddpenv_node_resolve(&env, backend, &sys, &node, err, sizeof(err)) < 0 ||
	    ddpenv_task_vars(&node, &env, &vars, err, sizeof(err)) < 0) {
		fprintf(stderr, "ddp-env: %s\n", err);
		goto out;
	}
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
