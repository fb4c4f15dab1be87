/* The reading side of the contract: what a training process accepts. */
#include "ddpenv.h"
#include "test.h"

static int rd(struct ddpenv_rank *r, char *err, const char *const *kv)
{
	struct ddpenv_env env;
	ddpenv_env_init(&env);
	for (; kv[0]; kv += 2)
		ddpenv_env_set(&env, kv[0], kv[1]);
	int rv = ddpenv_rank_read(&env, r, err, DDPENV_ERRLEN);
	ddpenv_env_free(&env);
	return rv;
}

int main(void)
{
	struct ddpenv_rank r;
	char err[DDPENV_ERRLEN];

	const char *none[] = { NULL };
	test_cond("nothing set: a standalone rank 0 of 1", rd(&r, err, none) == 0 && r.standalone &&
		  r.rank == 0 && r.world == 1);
	const char *plugin[] = { "RANK", "3", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2",
				 "NODE_RANK", "1", "MASTER_ADDR", "10.1.0.11", "MASTER_PORT", "29512",
				 "GLOO_SOCKET_IFNAME", "ib0", "DDP_BACKEND", "gloo", "DDP_RDZV_TOKEN", "abc",
				 "SLURM_RESTART_COUNT", "2", NULL };
	test_cond("what the plugin sets is read back", rd(&r, err, plugin) == 0 && !r.standalone &&
		  r.rank == 3 && r.world == 4 && r.local_rank == 1 && r.local_world == 2 &&
		  r.node_rank == 1 && r.master_port == 29512 && r.backend == DDPENV_BACKEND_GLOO &&
		  r.restart_count == 2);
	test_streq("... MASTER_ADDR", r.master_addr, "10.1.0.11");
	test_streq("... GLOO_SOCKET_IFNAME", r.gloo_ifname, "ib0");
	test_streq("... DDP_RDZV_TOKEN", r.token, "abc");
	const char *slurm[] = { "SLURM_PROCID", "2", "SLURM_STEP_NUM_TASKS", "8", NULL };
	test_cond("a task of an 8-task step without RANK", rd(&r, err, slurm) < 0);
	test_err("... says to use srun --ddp", err, "task 2 of a 8-task Slurm step but RANK and WORLD_SIZE are not set: run it with srun --ddp");
	const char *one[] = { "SLURM_PROCID", "0", "SLURM_STEP_NUM_TASKS", "1", NULL };
	test_cond("a 1-task step without RANK is standalone", rd(&r, err, one) == 0 && r.standalone);
	const char *half[] = { "RANK", "0", NULL };
	test_cond("RANK without WORLD_SIZE", rd(&r, err, half) < 0);
	test_err("... says both or neither", err, "RANK is set but WORLD_SIZE is not");
	const char *big[] = { "RANK", "4", "WORLD_SIZE", "4", "MASTER_ADDR", "h", "MASTER_PORT", "1", NULL };
	test_cond("RANK = WORLD_SIZE", rd(&r, err, big) < 0);
	test_err("... gives the range", err, "RANK=4: expected 0 to WORLD_SIZE-1 = 3");
	const char *noaddr[] = { "RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "1", NULL };
	test_cond("WORLD_SIZE 2 without MASTER_ADDR", rd(&r, err, noaddr) < 0);
	test_err("... names it", err, "WORLD_SIZE=2 but MASTER_ADDR is not set");
	const char *port[] = { "RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "65536", NULL };
	test_cond("MASTER_PORT 65536", rd(&r, err, port) < 0);
	test_err("... out of range", err, "MASTER_PORT=65536: expected 1 to 65535");
	const char *junk[] = { "RANK", "0x1", "WORLD_SIZE", "2", NULL };
	test_cond("RANK=0x1 is not a number", rd(&r, err, junk) < 0);
	test_err("... names it", err, "RANK");
	const char *be[] = { "RANK", "0", "WORLD_SIZE", "1", "DDP_BACKEND", "mpi", NULL };
	test_cond("DDP_BACKEND=mpi", rd(&r, err, be) < 0);
	test_err("... lists the choices", err, "DDP_BACKEND=mpi: expected nccl, gloo or auto");
	char longv[400];
	memset(longv, 'a', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = 0;
	const char *lng[] = { "RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", longv, "MASTER_PORT", "5", NULL };
	test_cond("an absurdly long MASTER_ADDR", rd(&r, err, lng) < 0);
	test_err("... is refused with its length", err, "MASTER_ADDR is 399 characters long");
	const char *lr[] = { "RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2", NULL };
	test_cond("LOCAL_RANK beyond LOCAL_WORLD_SIZE", rd(&r, err, lr) < 0);
	return test_report();
}
