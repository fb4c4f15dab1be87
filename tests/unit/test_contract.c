/* Step parsing and the per-task contract, from crafted environments. */
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

#include "test.h"
#include "fakesys.h"

static const struct fake_host hosts[] = {
	{ "node1", { "127.0.1.1" } },
	{ "node2", { "10.0.0.12" } },
	{ "node3", { "10.0.0.13" } },
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
	{ NULL, NULL, 0, 0 },
};

#define STEP3 "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=node[1-3]", \
	"SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=6", "SLURM_STEP_TASKS_PER_NODE=2(x3)"

static void test_full_contract(void)
{
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	struct ddpenv_node node;
	struct ddpenv_vars v;
	char err[DDPENV_ERRLEN] = "";
	int ok;

	env_of(&env, STEP3, "SLURM_PROCID=3", "SLURM_LOCALID=1", "SLURM_NODEID=1",
	       "SLURM_CPUS_ON_NODE=8", "SLURM_RESTART_COUNT=2", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("3-node step resolves", ok);
	if (!ok)
		printf("#   %s\n", err);
	test_streq("MASTER_ADDR via NodeAddr (trap)", var(&v, "MASTER_ADDR"), "10.0.0.11");
	test_streq("MASTER_PORT formula", var(&v, "MASTER_PORT"), "21714"); /* 20480+77*16+2 */
	test_streq("RANK", var(&v, "RANK"), "3");
	test_streq("LOCAL_RANK", var(&v, "LOCAL_RANK"), "1");
	test_streq("WORLD_SIZE", var(&v, "WORLD_SIZE"), "6");
	test_streq("LOCAL_WORLD_SIZE", var(&v, "LOCAL_WORLD_SIZE"), "2");
	test_streq("NODE_RANK", var(&v, "NODE_RANK"), "1");
	test_streq("GROUP_RANK", var(&v, "GROUP_RANK"), "1");
	test_streq("GROUP_WORLD_SIZE", var(&v, "GROUP_WORLD_SIZE"), "3");
	test_streq("ROLE_RANK", var(&v, "ROLE_RANK"), "3");
	test_streq("ROLE_WORLD_SIZE", var(&v, "ROLE_WORLD_SIZE"), "6");
	test_streq("ROLE_NAME", var(&v, "ROLE_NAME"), "default");
	test_streq("TORCHELASTIC_RESTART_COUNT", var(&v, "TORCHELASTIC_RESTART_COUNT"), "2");
	test_streq("TORCHELASTIC_MAX_RESTARTS", var(&v, "TORCHELASTIC_MAX_RESTARTS"), "0");
	test_streq("TORCHELASTIC_RUN_ID", var(&v, "TORCHELASTIC_RUN_ID"), "77.2");
	test_cond("never TORCHELASTIC_USE_AGENT_STORE", var(&v, "TORCHELASTIC_USE_AGENT_STORE") == NULL);
	test_streq("TORCH_NCCL_ASYNC_ERROR_HANDLING: torchrun's 1", var(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
	test_cond("... the plugin's", var_user(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0);
	test_cond("... not the old name", var(&v, "NCCL_ASYNC_ERROR_HANDLING") == NULL);
	test_streq("USE_LIBUV: 0 (env:// on a PyTorch built without libuv)", var(&v, "USE_LIBUV"), "0");
	test_cond("... the plugin's", var_user(&v, "USE_LIBUV") == 0);
	test_streq("NCCL_SOCKET_IFNAME", var(&v, "NCCL_SOCKET_IFNAME"), "enp2s0");
	test_streq("GLOO_SOCKET_IFNAME", var(&v, "GLOO_SOCKET_IFNAME"), "enp2s0");
	test_streq("OMP_NUM_THREADS = cpus on node / local tasks", var(&v, "OMP_NUM_THREADS"), "4");
	test_streq("DDP_BACKEND auto without GPUs", var(&v, "DDP_BACKEND"), "gloo");
	test_streq("marker", var(&v, DDPENV_MARKER), "77.2");
	test_cond("one head lookup per node", f.lookups == 1);
	ddpenv_env_free(&env);

	/* GPUs, cpus-per-task, user-set values */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "SLURM_CPUS_PER_TASK=3", "SLURM_STEP_GPUS=0,1", "MASTER_PORT=31000",
	       "MASTER_ADDR=10.0.0.12", "GLOO_SOCKET_IFNAME=ib7", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("user-set values resolve", ok);
	test_streq("auto with GPUs is nccl", var(&v, "DDP_BACKEND"), "nccl");
	test_streq("OMP_NUM_THREADS = cpus per task", var(&v, "OMP_NUM_THREADS"), "3");
	test_streq("user MASTER_PORT wins", var(&v, "MASTER_PORT"), "31000");
	test_cond("user MASTER_PORT marked user", var_user(&v, "MASTER_PORT") == 1);
	test_streq("user MASTER_ADDR wins", var(&v, "MASTER_ADDR"), "10.0.0.12");
	test_streq("user GLOO_SOCKET_IFNAME kept", var(&v, "GLOO_SOCKET_IFNAME"), "ib7");
	test_cond("GLOO_SOCKET_IFNAME marked user", var_user(&v, "GLOO_SOCKET_IFNAME") == 1);
	test_streq("NCCL_SOCKET_IFNAME still chosen", var(&v, "NCCL_SOCKET_IFNAME"), "enp2s0");
	ddpenv_env_free(&env);

	/* NCCL's error handling: the user's, under either of PyTorch's names */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "TORCH_NCCL_ASYNC_ERROR_HANDLING=3", "NCCL_ASYNC_ERROR_HANDLING=0", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("a user's TORCH_NCCL_ASYNC_ERROR_HANDLING is left alone",
		  ok && !strcmp(var(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "3") &&
		  var_user(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == 1);
	ddpenv_env_free(&env);
	/* a user's USE_LIBUV (a PyTorch built with libuv, at scale) */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "USE_LIBUV=1", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("a user's USE_LIBUV=1 is left alone",
		  ok && !strcmp(var(&v, "USE_LIBUV"), "1") && var_user(&v, "USE_LIBUV") == 1);
	ddpenv_env_free(&env);
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "NCCL_ASYNC_ERROR_HANDLING=0", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("a user's NCCL_ASYNC_ERROR_HANDLING (PyTorch before 2.2) is left alone",
		  ok && !strcmp(var(&v, "NCCL_ASYNC_ERROR_HANDLING"), "0") &&
		  var_user(&v, "NCCL_ASYNC_ERROR_HANDLING") == 1);
	test_cond("... and the new name, which would override it, is not set",
		  var(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL);
	ddpenv_env_free(&env);
	/* a nested step's inherited value is the outer step's, not the user's */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "NCCL_ASYNC_ERROR_HANDLING=0", DDPENV_MARKER "=76.0", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_streq("under another step's marker the default is set",
		   ok ? var(&v, "TORCH_NCCL_ASYNC_ERROR_HANDLING") : err, "1");
	ddpenv_env_free(&env);

	/* MIG GRES: NCCL does not run ranks on MIG devices. */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_STEP_GPUS=0,1",
	       "CUDA_VISIBLE_DEVICES=MIG-4a1b2c3d-5e6f-5a7b-8c9d-0e1f2a3b4c5d,MIG-5b2c3d4e-6f70-5b8c-9dae-1f2a3b4c5d6e",
	       NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("MIG GPUs resolve", ok);
	test_streq("auto with MIG GPUs is gloo", var(&v, "DDP_BACKEND"), "gloo");
	test_err("... saying why", node.backend_how, "MIG devices, on which NCCL does not run ranks");
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("... an explicit --ddp=nccl is the user's", ok && !strcmp(var(&v, "DDP_BACKEND"), "nccl"));
	ddpenv_env_free(&env);

	/* GPU sharing GRES: tasks of a node may get one GPU, and NCCL runs
	 * one rank per GPU (MPS or not). */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_STEP_GPUS=0",
	       "CUDA_VISIBLE_DEVICES=0", "SLURM_SHARDS_ON_NODE=2", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("gres/shard, 2 tasks a node: resolves", ok);
	test_streq("... auto is gloo", var(&v, "DDP_BACKEND"), "gloo");
	test_err("... saying why", node.backend_how,
		 "--ddp=auto: the step's GPUs are shared (gres/shard) and a node runs several tasks; NCCL runs one rank per GPU");
	test_cond("... an explicit --ddp=nccl fails",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_NCCL, NULL, &sys, &node, err, sizeof(err)) == 0 &&
		  ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) < 0);
	test_err("... naming the sharing", err,
		 "node 0 runs 2 tasks of the step on 1 shared GPU(s) (gres/shard, SLURM_STEP_GPUS): NCCL cannot "
		 "share a GPU between ranks, even with MPS; use --ddp=gloo");
	ddpenv_env_free(&env);

	/* The choice is the step's, not the node's: one node with 2 tasks
	 * makes every node gloo, node 2 (1 task) included. */
	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=node[1-3]",
	       "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=5", "SLURM_STEP_TASKS_PER_NODE=2(x2),1",
	       "SLURM_PROCID=4", "SLURM_LOCALID=0", "SLURM_NODEID=2", "SLURM_STEP_GPUS=0",
	       "CUDA_VISIBLE_DEVICES=0", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("gres/mps, the one-task node of 2(x2),1 is gloo too",
		  ok && !strcmp(var(&v, "DDP_BACKEND"), "gloo") && strstr(node.backend_how, "(gres/mps)"));
	ddpenv_env_free(&env);

	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=2", "SLURM_STEP_NODELIST=node[1-3]",
	       "SLURM_STEP_NUM_NODES=3", "SLURM_STEP_NUM_TASKS=3", "SLURM_STEP_TASKS_PER_NODE=1(x3)",
	       "SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1", "SLURM_STEP_GPUS=2",
	       "CUDA_VISIBLE_DEVICES=2", "SLURM_SHARDS_ON_NODE=1", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_AUTO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("gres/shard, one task a node: nccl", ok && !strcmp(var(&v, "DDP_BACKEND"), "nccl"));
	test_err("... saying why", node.backend_how, "--ddp=auto: the step has GPUs (gres/shard, one task per node)");
	ddpenv_env_free(&env);

	/* Values inherited from an outer --ddp step (marker) are recomputed. */
	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "MASTER_PORT=29999", "OMP_NUM_THREADS=9", DDPENV_MARKER "=77.1", NULL);
	ok = ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
	     ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) == 0;
	test_cond("inherited values resolve", ok);
	test_streq("inherited MASTER_PORT recomputed", var(&v, "MASTER_PORT"), "21714");
	test_streq("inherited OMP_NUM_THREADS recomputed", var(&v, "OMP_NUM_THREADS"), "1");
	ddpenv_env_free(&env);
}

static void test_bad_env(void)
{
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	struct ddpenv_node node;
	struct ddpenv_vars v;
	char err[DDPENV_ERRLEN];

	env_of(&env, "SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=node[1-",
	       "SLURM_STEP_NUM_TASKS=2", NULL);
	test_cond("malformed node list refused", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("names the list", err, "node[1-");
	test_err("names the variable", err, "SLURM_STEP_NODELIST");
	ddpenv_env_free(&env);

	env_of(&env, "SLURM_JOB_ID=5", NULL);
	test_cond("batch shell (no step id) refused", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("says run inside a step", err, "SLURM_STEP_ID");
	ddpenv_env_free(&env);

	env_of(&env, "SLURM_JOB_ID=abc", NULL);
	test_cond("non-numeric job id refused", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("names the value", err, "SLURM_JOB_ID=abc");
	ddpenv_env_free(&env);

	env_of(&env, "SLURM_JOB_ID=5", "SLURM_STEP_ID=4294967291", "SLURM_STEP_NODELIST=node1",
	       "SLURM_STEP_NUM_TASKS=1", NULL);
	test_cond("batch step id refused", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("says batch", err, "batch");
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_PROCID=9", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "MASTER_PORT=70000", NULL);
	test_cond("user MASTER_PORT out of range refused", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("names MASTER_PORT", err, "MASTER_PORT=70000");
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_PROCID=9", "SLURM_LOCALID=0", "SLURM_NODEID=0", NULL);
	test_cond("node resolves", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) == 0);
	test_cond("rank beyond world refused", ddpenv_task_vars(&node, &env, &v, err, sizeof(err)) < 0);
	test_err("names SLURM_PROCID", err, "SLURM_PROCID=9");
	ddpenv_env_free(&env);

	struct ddpenv_addr a;
	enum ddpenv_backend b;
	(void)a;
	test_cond("--ddp=foo refused", ddpenv_backend_parse("foo", &b, err, sizeof(err)) < 0);
	test_streq("message", err, "--ddp=foo: unknown backend (expected nccl, gloo or auto)");
	test_cond("--ddp= refused", ddpenv_backend_parse("", &b, err, sizeof(err)) < 0);
	test_err("empty named", err, "empty backend");
	test_cond("bare --ddp is auto", ddpenv_backend_parse(NULL, &b, err, sizeof(err)) == 0 && b == DDPENV_BACKEND_AUTO);
	test_cond("nccl", ddpenv_backend_parse("nccl", &b, err, sizeof(err)) == 0 && b == DDPENV_BACKEND_NCCL);
}

static void test_hostlists(void)
{
	char h[DDPENV_HOSTLEN], err[DDPENV_ERRLEN];
	uint32_t c;

	test_cond("compressed list", ddpenv_hostlist_first("gpu[0007-0099,0200],login1", h, sizeof(h), err, sizeof(err)) == 0);
	test_streq("first host keeps zero padding", h, "gpu0007");
	test_cond("plain list", ddpenv_hostlist_first("b1,a1", h, sizeof(h), err, sizeof(err)) == 0);
	test_streq("first in given order", h, "b1");
	test_cond("16384-node list", ddpenv_hostlist_first("gpu[00001-16384]", h, sizeof(h), err, sizeof(err)) == 0);
	test_streq("16384: first", h, "gpu00001");
	test_cond("nth: 0", ddpenv_hostlist_nth("n[1-3],a7", 0, h, sizeof(h), err, sizeof(err)) == 0);
	test_streq("... the first", h, "n1");
	test_cond("nth: 3", ddpenv_hostlist_nth("n[1-3],a7", 3, h, sizeof(h), err, sizeof(err)) == 0);
	test_streq("... the last, in the list's order", h, "a7");
	test_cond("nth past the end refused", ddpenv_hostlist_nth("n[1-3]", 3, h, sizeof(h), err, sizeof(err)) < 0);
	test_err("... naming the list and its length", err, "node list 'n[1-3]' has 3 hosts: expected more than 3");
	test_cond("nth of 16384: the last", ddpenv_hostlist_nth("gpu[00001-16384]", 16383, h, sizeof(h), err,
								sizeof(err)) == 0 && !strcmp(h, "gpu16384"));
	test_cond("contains", ddpenv_hostlist_contains("n[1-9]", "n5") == 1);
	test_cond("not contains", ddpenv_hostlist_contains("n[1-9]", "n10") == 0);

	test_cond("tpn run-length", ddpenv_tasks_on_node("2(x3),1", 3, &c, err, sizeof(err)) == 0 && c == 1);
	test_cond("tpn first run", ddpenv_tasks_on_node("2(x3),1", 2, &c, err, sizeof(err)) == 0 && c == 2);
	test_cond("tpn plain", ddpenv_tasks_on_node("4,3,2", 1, &c, err, sizeof(err)) == 0 && c == 3);
	test_cond("tpn past end refused", ddpenv_tasks_on_node("2(x3)", 3, &c, err, sizeof(err)) < 0);
	test_cond("tpn garbage refused", ddpenv_tasks_on_node("2(y3)", 0, &c, err, sizeof(err)) < 0);
	test_err("tpn garbage named", err, "2(y3)");
	test_cond("tpn max", ddpenv_tasks_max("1(x3),4,2(x2)", &c, err, sizeof(err)) == 0 && c == 4);
	test_cond("tpn max of one", ddpenv_tasks_max("1(x128)", &c, err, sizeof(err)) == 0 && c == 1);
	test_cond("tpn max of garbage refused", ddpenv_tasks_max("1,x", &c, err, sizeof(err)) < 0);
	test_err("... naming it", err, "SLURM_STEP_TASKS_PER_NODE=1,x: expected counts such as 2(x3),1");
	test_cond("tpn count past 32 bits refused", ddpenv_tasks_on_node("4294967296", 0, &c, err, sizeof(err)) < 0);
}

static void test_het(void)
{
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	struct ddpenv_node node;
	char err[DDPENV_ERRLEN];

	/* Component 0 on node3, component 1 on node[1-2]: rank 0 is on node3,
	 * although the step's (sorted) node list starts with node1. */
	env_of(&env, "SLURM_JOB_ID=40", "SLURM_STEP_ID=0", "SLURM_STEP_NODELIST=node[1-3]",
	       "SLURM_STEP_NUM_TASKS=4", "SLURM_STEP_NUM_NODES=3", "SLURM_HET_SIZE=2",
	       "SLURM_JOB_NODELIST_PACK_GROUP_0=node3", "SLURM_JOB_NODELIST_PACK_GROUP_1=node[1-2]", NULL);
	test_cond("het step resolves", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) == 0);
	test_streq("het head is component 0's node", node.step.head, "node3");
	test_streq("het head address", node.master_addr, "10.0.0.13");
	ddpenv_env_free(&env);

	/* Component 0 allocated node[2-3] but the step uses only node3. */
	env_of(&env, "SLURM_JOB_ID=40", "SLURM_STEP_ID=1", "SLURM_STEP_NODELIST=node[1,3]",
	       "SLURM_STEP_NUM_TASKS=2", "SLURM_HET_SIZE=2",
	       "SLURM_JOB_NODELIST_HET_GROUP_0=node[2-3]", NULL);
	test_cond("het sub-step resolves", ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) == 0);
	test_streq("het head is in the step", node.step.head, "node3");
	ddpenv_env_free(&env);

	/* Lists from the environment are walked boundedly: a component list
	 * of 1.2 million names in 120 bytes (a modified srun's; libslurm
	 * takes at most 65,536 a range) is refused at once, and a long step
	 * list is read once, not once per host. */
	struct timespec t0, t1;
	char many[512] = "SLURM_JOB_NODELIST_HET_GROUP_0=";
	for (char c = 'a'; c < 'a' + 20; c++) {
		size_t l = strlen(many);
		snprintf(many + l, sizeof(many) - l, "%s%c[00000-59999]", c > 'a' ? "," : "", c);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	env_of(&env, "SLURM_JOB_ID=40", "SLURM_STEP_ID=1", "SLURM_STEP_NODELIST=node[1,3]",
	       "SLURM_STEP_NUM_TASKS=2", "SLURM_HET_SIZE=2", many, NULL);
	test_cond("a component list of 1,200,000 hosts is refused",
		  ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("... naming the variable and the bound", err,
		 "SLURM_JOB_NODELIST_HET_GROUP_0=a[00000-59999],b[00000-59999],");
	test_err("... and the bound", err, "names 1200000 hosts: expected at most 65536");
	ddpenv_env_free(&env);
	env_of(&env, "SLURM_JOB_ID=40", "SLURM_STEP_ID=1", "SLURM_STEP_NODELIST=node[00001-65536]",
	       "SLURM_STEP_NUM_TASKS=2", "SLURM_HET_SIZE=2",
	       "SLURM_JOB_NODELIST_HET_GROUP_0=node[70001-75000],node65536", NULL);
	test_cond("5,001 component hosts against a step of 65,536: the head is the one they share",
		  ddpenv_node_resolve(&env, 0, NULL, &sys, &node, err, sizeof(err)) == 0 ||
			  strcmp(node.step.head, "node65536") == 0);
	test_streq("... node65536", node.step.head, "node65536");
	ddpenv_env_free(&env);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double t = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	test_cond("... both within a second", t < 1.0);
	printf("#   %.3f s\n", t);
}

/* An arbitrary distribution (SLURM_HOSTFILE, srun -m arbitrary -w LIST):
 * task 0 runs where the list says first, which only srun --ddp tells the
 * nodes (SLURM_DDP_TASK0_NODE); without it no node can know, and resolution
 * fails saying so rather than hand out the wrong head. */
static void test_arbitrary(void)
{
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	struct ddpenv_node node;
	char err[DDPENV_ERRLEN] = "";

	env_of(&env, STEP3, "SLURM_DISTRIBUTION=arbitrary", "SLURM_DDP_TASK0_NODE=77.2:node3", NULL);
	test_cond("arbitrary with srun's task-0 node: resolves",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0);
	test_streq("... the head is task 0's node, not the list's first", node.step.head, "node3");
	test_streq("... and its address", node.master_addr, "10.0.0.13");
	test_err("... saying where it came from", node.step.head_how,
		 "node of task 0 in the step's layout (arbitrary, from srun --ddp)");
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_DISTRIBUTION=arbitrary", NULL);
	test_cond("arbitrary without it: refused",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("... saying why and what to do", err,
		 "SLURM_DISTRIBUTION=arbitrary: task 0 runs on the node the host file or -w list names first, "
		 "not necessarily the first of SLURM_STEP_NODELIST=node[1-3], and only srun knows which: "
		 "launch the step with srun --ddp");
	ddpenv_env_free(&env);

	/* another step's value was inherited from an outer step: not ours */
	env_of(&env, STEP3, "SLURM_DISTRIBUTION=arbitrary", "SLURM_DDP_TASK0_NODE=77.1:node3", NULL);
	test_cond("an outer step's task-0 node is not this step's",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("... so this one is still unknown", err, "SLURM_DISTRIBUTION=arbitrary: task 0 runs");
	ddpenv_env_free(&env);
	env_of(&env, STEP3, "SLURM_DDP_TASK0_NODE=77.1:node3", NULL);
	test_cond("... and under block it is ignored",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
		  !strcmp(node.step.head, "node1"));
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_DISTRIBUTION=arbitrary", "SLURM_DDP_TASK0_NODE=77.2:node9", NULL);
	test_cond("a task-0 node outside the step: refused",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("... naming both", err,
		 "SLURM_DDP_TASK0_NODE=77.2:node9: expected a host of SLURM_STEP_NODELIST=node[1-3] after \"77.2:\"");
	ddpenv_env_free(&env);

	/* one node: task 0 cannot be anywhere else */
	env_of(&env, "SLURM_JOB_ID=77", "SLURM_STEP_ID=3", "SLURM_STEP_NODELIST=node2",
	       "SLURM_STEP_NUM_NODES=1", "SLURM_STEP_NUM_TASKS=2", "SLURM_DISTRIBUTION=arbitrary", NULL);
	test_cond("arbitrary on one node: resolves",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
		  !strcmp(node.step.head, "node2"));
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_DISTRIBUTION=cyclic", NULL);
	test_cond("cyclic: the list's first host",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0 &&
		  !strcmp(node.step.head, "node1"));
	ddpenv_env_free(&env);
}

/* DDP_HEAD_FROM in the step's environment (the plugstack default or the
 * user's) steers the head's address, and a bad value names itself. */
static void test_head_from_env(void)
{
	struct fake f = { hosts, nodeaddrs, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_env env;
	struct ddpenv_node node;
	char err[DDPENV_ERRLEN] = "";

	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "DDP_HEAD_FROM=nodeaddr", NULL);
	test_cond("DDP_HEAD_FROM=nodeaddr: resolves",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) == 0);
	test_streq("... the head's NodeAddr", node.master_addr, "10.0.0.11");
	test_cond("... without a name lookup", f.lookups == 0);
	ddpenv_env_free(&env);

	env_of(&env, STEP3, "SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0",
	       "DDP_HEAD_FROM=dns", NULL);
	test_cond("DDP_HEAD_FROM=dns: refused",
		  ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, NULL, &sys, &node, err, sizeof(err)) < 0);
	test_err("... naming the variable and the choices", err,
		 "DDP_HEAD_FROM (set in the job's environment): 'dns': expected auto, name or nodeaddr");
	ddpenv_env_free(&env);
}

/* The fake's lookup, the first name it is asked kept. */
static char first_looked_up[DDPENV_HOSTLEN];
static int first_lookup(void *ctx, const char *name, struct ddpenv_addr *out, size_t max, char *err, size_t errlen)
{
	if (!((struct fake *)ctx)->lookups)
		snprintf(first_looked_up, sizeof(first_looked_up), "%s", name);
	return fake_lookup(ctx, name, out, max, err, errlen);
}

/* The name ddpenv_node_lookup_name gives (a lookup started ahead) is the
 * one ddpenv_node_resolve then looks up first, or none where it looks
 * none up.  WANT: that name, or NULL for none. */
static void lookup_name_case(const char *desc, const struct fake_host *nodeaddr_tab, const char *want, ...)
{
	struct fake f = { hosts, nodeaddr_tab, ifs, "enp2s0", 0 };
	struct ddpenv_sys sys = fake_sys(&f);
	struct ddpenv_config c;
	struct ddpenv_settings *s = malloc(sizeof(*s));
	struct ddpenv_env env;
	struct ddpenv_node node;
	char err[DDPENV_ERRLEN] = "", name[DDPENV_HOSTLEN] = "", d[200];
	const char *kv;
	va_list ap;
	int r;

	ddpenv_env_init(&env);
	va_start(ap, want);
	while ((kv = va_arg(ap, const char *))) {
		const char *eq = strchr(kv, '=');
		char key[64];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		ddpenv_env_set(&env, key, eq + 1);
	}
	va_end(ap);
	ddpenv_config_init(&c);
	r = s && ddpenv_config_effective(&c, NULL, &env, s, err, sizeof(err)) == 0 ?
		ddpenv_node_lookup_name(&env, s, &sys, name, sizeof(name)) : -2;
	test_cond(desc, want ? r == 1 && !strcmp(name, want) : r == 0);
	if (want ? r != 1 || strcmp(name, want) : r != 0)
		printf("#   got %d '%s', want '%s'\n", r, name, want ? want : "(none)");
	sys.lookup = first_lookup;
	(void)ddpenv_node_resolve(&env, DDPENV_BACKEND_GLOO, s, &sys, &node, err, sizeof(err));
	snprintf(d, sizeof(d), "... the name resolve looks up first (%s)", want ? want : "none");
	test_cond(d, want ? f.lookups > 0 && !strcmp(first_looked_up, want) : f.lookups == 0);
	if (want ? !f.lookups || strcmp(first_looked_up, want) : f.lookups)
		printf("#   resolve looked up %d names, the first '%s'\n", f.lookups, first_looked_up);
	ddpenv_config_free(&c);
	ddpenv_env_free(&env);
	free(s);
}

static void test_lookup_name(void)
{
	static const struct fake_host by_name[] = { { "node1", { "node2" } }, { NULL, { NULL } } };

	lookup_name_case("the name looked up ahead: the head's", nodeaddrs, "node1", STEP3, NULL);
	lookup_name_case("head_from name: the head's", nodeaddrs, "node1", STEP3, "DDP_HEAD_FROM=name", NULL);
	lookup_name_case("head_from nodeaddr, a NodeAddr that is an address: none", nodeaddrs, NULL, STEP3,
			 "DDP_HEAD_FROM=nodeaddr", NULL);
	lookup_name_case("head_from nodeaddr, a NodeAddr that is a name: that name", by_name, "node2", STEP3,
			 "DDP_HEAD_FROM=nodeaddr", NULL);
	lookup_name_case("the user's MASTER_ADDR, a name: that name", nodeaddrs, "node3", STEP3,
			 "MASTER_ADDR=node3", NULL);
	lookup_name_case("the user's MASTER_ADDR, an address: none", nodeaddrs, NULL, STEP3,
			 "MASTER_ADDR=10.0.0.12", NULL);
	lookup_name_case("an outer step's MASTER_ADDR (the marker): the head's", nodeaddrs, "node1", STEP3,
			 "MASTER_ADDR=node3", DDPENV_MARKER "=70.1", NULL);
	lookup_name_case("no step in the environment: none", nodeaddrs, NULL, "SLURM_JOB_ID=77", NULL);
}

int main(void)
{
	test_hostlists();
	test_full_contract();
	test_bad_env();
	test_het();
	test_arbitrary();
	test_head_from_env();
	test_lookup_name();
	return test_report();
}
