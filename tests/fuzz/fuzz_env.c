/* libFuzzer target: a task's environment (KEY=VALUE lines) through the
 * user overrides, the step's facts (host lists expanded with libslurm), the
 * head, port and interface on a crafted system, and the task's variables.
 * Any input must give a contract or an error, never a crash or a hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddpenv.h"
#include "fakesys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const struct fake_host hosts[] = {
	{ "node1", { "127.0.1.1" } },
	{ "node2", { "10.0.0.12", "fd00::12" } },
	{ "node3", { "fd00::13" } },
	{ "gpu0007", { "10.0.0.7" } },
	{ NULL, { NULL } },
};
static const struct fake_host nodeaddrs[] = {
	{ "node1", { "10.0.0.11" } },
	{ NULL, { NULL } },
};
static const struct fake_if ifs[] = {
	{ "lo", "127.0.0.1", 8, UP | IFF_LOOPBACK },
	{ "docker0", "172.17.0.1", 16, UP },
	{ "enp2s0", "10.0.0.12", 24, UP },
	{ "ib0", "fd00::12", 64, UP },
	{ NULL, NULL, 0, 0 },
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ddpenv_config c;
	static struct ddpenv_settings e;
	static struct ddpenv_node node;
	static struct ddpenv_vars vars;
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	char err[DDPENV_ERRLEN];
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	ddpenv_env_init(&env);
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *eq = strchr(line, '=');
		if (eq && eq != line) {
			*eq = '\0';
			ddpenv_env_set(&env, line, eq + 1);
		}
	}
	/* The binding plan on a DGX H100 (loaded once): GPU lists, task
	 * counts, user bindings and CUDA_VISIBLE_DEVICES from the input. */
	static struct ddpenv_topo *topo;
	static struct ddpenv_bind_plan plan;
	int planned = 0;
	if (!topo && ddpenv_topo_load(TOPODIR "/dgx-h100.xml", 0, &topo, err, sizeof(err)) < 0)
		abort();
	/* The NVIDIA driver's list: DDP_FUZZ_NVIDIA=minor/busid/uuid/excluded,... */
	static struct ddpenv_nvgpu nv[DDPENV_MAX_GPUS];
	size_t nnv = 0;
	const char *nvs = ddpenv_env_get(&env, "DDP_FUZZ_NVIDIA");
	if (nvs) {
		char buf[DDPENV_MAX_GPUS * 80], *save = NULL;
		snprintf(buf, sizeof(buf), "%s", nvs);
		for (char *it = strtok_r(buf, ",", &save); it && nnv < DDPENV_MAX_GPUS;
		     it = strtok_r(NULL, ",", &save)) {
			struct ddpenv_nvgpu *g = &nv[nnv++];
			char *f[4] = { it, "", "", "" }, *p = it;
			for (int k = 1; k < 4 && (p = strchr(p, '/')); k++) {
				*p++ = '\0';
				f[k] = p;
			}
			memset(g, 0, sizeof(*g));
			g->minor = atoi(f[0]);
			snprintf(g->busid, sizeof(g->busid), "%s", f[1]);
			snprintf(g->uuid, sizeof(g->uuid), "%s", f[2]);
			g->excluded = f[3][0] == '1';
		}
	}
	(void)ddpenv_topo_set_nvidia(topo, nv, nnv, err, sizeof(err));
	enum ddpenv_gres_order order = DDPENV_GRES_ORDER_BUS;
	const char *o = ddpenv_env_get(&env, "DDP_FUZZ_GRES_ORDER");
	if (o)
		(void)ddpenv_gres_order_parse(o, &order, err, sizeof(err));
	ddpenv_topo_set_gres_order(topo, order);
	enum ddpenv_bind policy = DDPENV_BIND_AUTO;
	(void)ddpenv_bind_parse(ddpenv_env_get(&env, "DDP_BIND"), &policy, err, sizeof(err));
	planned = ddpenv_bind_plan(topo, &env, policy, ddpenv_env_get(&env, "DDP_FUZZ_ALLOWED"), &plan,
				   err, sizeof(err)) == 0;
	ddpenv_config_init(&c);
	if (ddpenv_config_effective(&c, ddpenv_env_get(&env, "SLURM_JOB_PARTITION"), &env, &e,
				    err, sizeof(err)) == 0 &&
	    ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, &e, &sys, &node, err, sizeof(err)) == 0) {
		node.plan = planned ? &plan : NULL;
		(void)ddpenv_task_vars(&node, &env, &vars, err, sizeof(err));
	}
	ddpenv_bind_plan_free(&plan);
	const char *list = ddpenv_env_get(&env, "SLURM_STEP_NODELIST");
	if (list) {
		char first[DDPENV_HOSTLEN];
		(void)ddpenv_hostlist_first(list, first, sizeof(first), err, sizeof(err));
		(void)ddpenv_hostlist_contains(list, "node2");
	}
	struct ddpenv_rank r;
	(void)ddpenv_rank_read(&env, &r, err, sizeof(err));
	ddpenv_config_free(&c);
	ddpenv_env_free(&env);
	free(text);
	return 0;
}
