/* The reading side of the contract: what a training process finds in its
 * environment, whoever set it (the plugin, torchrun, or a person). */
#include <stdio.h>
#include <string.h>

#include "ddpenv.h"
#include "internal.h"

static int copy(const char *key, const char *v, char *out, size_t len, char *err, size_t errlen)
{
	if (strlen(v) >= len) {
		snprintf(err, errlen, "%s is %zu characters long (at most %zu expected)",
			 key, strlen(v), len - 1);
		return -1;
	}
	snprintf(out, len, "%s", v);
	return 0;
}

int ddpenv_rank_read(const struct ddpenv_env *env, struct ddpenv_rank *r, char *err, size_t errlen)
{
	const char *rank = ddpenv_env_get(env, "RANK");
	const char *world = ddpenv_env_get(env, "WORLD_SIZE");
	const char *v;
	uint32_t u;

	memset(r, 0, sizeof(*r));
	r->world = 1;
	r->local_world = 1;
	r->backend = DDPENV_BACKEND_AUTO;
	if (!rank && !world) {
		const char *procid = ddpenv_env_get(env, "SLURM_PROCID");
		const char *ntasks = ddpenv_env_get(env, "SLURM_STEP_NUM_TASKS");
		if (procid && ntasks && strcmp(ntasks, "1") != 0) {
			snprintf(err, errlen, "this is task %s of a %s-task Slurm step but RANK and "
				 "WORLD_SIZE are not set: run it with srun --ddp (or set the "
				 "torchrun variables yourself)", procid, ntasks);
			return -1;
		}
		r->standalone = 1;
		return 0;
	}
	if (!rank || !world) {
		snprintf(err, errlen, "%s is set but %s is not (both or neither expected)",
			 rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK");
		return -1;
	}
	if (ddpenv_parse_u32("WORLD_SIZE", world, &u, err, errlen) < 0)
		return -1;
	if (u == 0 || u > (1u << 24)) {
		snprintf(err, errlen, "WORLD_SIZE=%s: expected 1 to %u", world, 1u << 24);
		return -1;
	}
	r->world = (int)u;
	if (ddpenv_parse_u32("RANK", rank, &u, err, errlen) < 0)
		return -1;
	if (u >= (uint32_t)r->world) {
		snprintf(err, errlen, "RANK=%s: expected 0 to WORLD_SIZE-1 = %d", rank, r->world - 1);
		return -1;
	}
	r->rank = (int)u;
	r->local_rank = r->world == 1 ? 0 : -1;
	if ((v = ddpenv_env_get(env, "LOCAL_RANK"))) {
		if (ddpenv_parse_u32("LOCAL_RANK", v, &u, err, errlen) < 0)
			return -1;
		r->local_rank = (int)u;
	}
	if ((v = ddpenv_env_get(env, "LOCAL_WORLD_SIZE"))) {
		if (ddpenv_parse_u32("LOCAL_WORLD_SIZE", v, &u, err, errlen) < 0)
			return -1;
		if (u == 0) {
			snprintf(err, errlen, "LOCAL_WORLD_SIZE=0: expected at least 1");
			return -1;
		}
		r->local_world = (int)u;
	}
	if (r->local_rank < 0)
		r->local_rank = 0;
	if (r->local_rank >= r->local_world && ddpenv_env_get(env, "LOCAL_WORLD_SIZE")) {
		snprintf(err, errlen, "LOCAL_RANK=%d: expected below LOCAL_WORLD_SIZE=%d",
			 r->local_rank, r->local_world);
		return -1;
	}
	if ((v = ddpenv_env_get(env, "NODE_RANK")) || (v = ddpenv_env_get(env, "GROUP_RANK"))) {
		if (ddpenv_parse_u32("NODE_RANK", v, &u, err, errlen) < 0)
			return -1;
		r->node_rank = (int)u;
	}
	const char *addr = ddpenv_env_get(env, "MASTER_ADDR");
	const char *port = ddpenv_env_get(env, "MASTER_PORT");
	if (r->world > 1 && (!addr || !*addr || !port)) {
		snprintf(err, errlen, "WORLD_SIZE=%d but %s is not set (run under srun --ddp or "
			 "torchrun, or set MASTER_ADDR and MASTER_PORT)", r->world,
			 !addr || !*addr ? "MASTER_ADDR" : "MASTER_PORT");
		return -1;
	}
	if (addr && copy("MASTER_ADDR", addr, r->master_addr, sizeof(r->master_addr), err, errlen) < 0)
		return -1;
	if (port) {
		if (ddpenv_parse_u32("MASTER_PORT", port, &u, err, errlen) < 0)
			return -1;
		if (u == 0 || u > 65535) {
			snprintf(err, errlen, "MASTER_PORT=%s: expected 1 to 65535", port);
			return -1;
		}
		r->master_port = (int)u;
	}
	if ((v = ddpenv_env_get(env, "GLOO_SOCKET_IFNAME")) &&
	    copy("GLOO_SOCKET_IFNAME", v, r->gloo_ifname, sizeof(r->gloo_ifname), err, errlen) < 0)
		return -1;
	if ((v = ddpenv_env_get(env, "NCCL_SOCKET_IFNAME")) &&
	    copy("NCCL_SOCKET_IFNAME", v, r->nccl_ifname, sizeof(r->nccl_ifname), err, errlen) < 0)
		return -1;
	if ((v = ddpenv_env_get(env, "DDP_RDZV_TOKEN")) &&
	    copy("DDP_RDZV_TOKEN", v, r->token, sizeof(r->token), err, errlen) < 0)
		return -1;
	if ((v = ddpenv_env_get(env, "DDP_BACKEND")) && *v) {
		char e2[DDPENV_ERRLEN];
		if (ddpenv_backend_parse(v, &r->backend, e2, sizeof(e2)) < 0) {
			snprintf(err, errlen, "DDP_BACKEND=%s: expected nccl, gloo or auto", v);
			return -1;
		}
	}
	if ((v = ddpenv_env_get(env, "SLURM_RESTART_COUNT"))) {
		if (ddpenv_parse_u32("SLURM_RESTART_COUNT", v, &u, err, errlen) < 0)
			return -1;
		r->restart_count = (int)u;
	}
	return 0;
}
