/* The environment snapshot: a small owned list of KEY=VALUE strings. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "ddpenv.h"
#include "internal.h"

const char *const ddpenv_env_keys[] = {
	"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEPID",
	"SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES", "SLURM_STEP_NUM_TASKS",
	"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS", "SLURM_NNODES",
	"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURMD_NODENAME",
	"SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_RESTART_COUNT",
	"SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES",
	"SLURM_SHARDS_ON_NODE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
	"SLURM_HET_SIZE", "SLURM_PACK_SIZE",
	"SLURM_JOB_NODELIST_HET_GROUP_0", "SLURM_JOB_NODELIST_PACK_GROUP_0",
	"SLURM_DISTRIBUTION", DDPENV_TASK0_NODE,
	"MASTER_ADDR", "MASTER_PORT", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
	"OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "USE_LIBUV", "DDP_BACKEND", "DDP_HEAD_FROM", DDPENV_MARKER,
	"DDP_PORT", "DDP_PORT_RANGE", "DDP_IFACE", "DDP_OMP_NUM_THREADS",
	"DDP_RDZV_TOKEN", "DDP_CONFIG", "SLURM_JOB_PARTITION",
	"SLURM_CPU_BIND", "SLURM_MEM_BIND", "SLURM_GPU_BIND", "SLURMD_TRES_BIND",
	"GPU_DEVICE_ORDINAL", "CUDA_DEVICE_ORDER", "NCCL_IB_HCA", "DDP_BIND", DDPENV_SLURM_CVD,
	DDPENV_SLURM_STEP_GPUS, DDPENV_SLURM_CPU_BIND,
	NULL,
};

const char *const ddpenv_plugin_keys[] = {
	"DDP_GPU_BUSID", "DDP_NIC", DDPENV_SLURM_CVD, DDPENV_SLURM_STEP_GPUS, DDPENV_SLURM_CPU_BIND,
	"DDP_RDZV_TOKEN", "DDP_CONFIG",
	NULL,
};

void ddpenv_env_init(struct ddpenv_env *env)
{
	env->kv = NULL;
	env->n = env->cap = 0;
}

void ddpenv_env_free(struct ddpenv_env *env)
{
	for (size_t i = 0; i < env->n; i++)
		free(env->kv[i]);
	free(env->kv);
	ddpenv_env_init(env);
}

static ssize_t find(const struct ddpenv_env *env, const char *key, size_t klen)
{
	for (size_t i = 0; i < env->n; i++)
		if (strncmp(env->kv[i], key, klen) == 0 && env->kv[i][klen] == '=')
			return (ssize_t)i;
	return -1;
}

void ddpenv_env_unset(struct ddpenv_env *env, const char *key)
{
	ssize_t i = key ? find(env, key, strlen(key)) : -1;

	if (i < 0)
		return;
	free(env->kv[i]);
	env->kv[i] = env->kv[--env->n];
}

int ddpenv_env_set(struct ddpenv_env *env, const char *key, const char *value)
{
	size_t klen, vlen;
	char *s;
	ssize_t i;

	if (!key || !*key || strchr(key, '=') || !value) {
		errno = EINVAL;
		return -1;
	}
	klen = strlen(key);
	vlen = strlen(value);
	s = malloc(klen + vlen + 2);
	if (!s)
		return -1;
	memcpy(s, key, klen);
	s[klen] = '=';
	memcpy(s + klen + 1, value, vlen + 1);

	i = find(env, key, klen);
	if (i >= 0) {
		free(env->kv[i]);
		env->kv[i] = s;
		return 0;
	}
	if (env->n == env->cap) {
		size_t cap = env->cap ? env->cap * 2 : 32;
		char **kv = realloc(env->kv, cap * sizeof(*kv));
		if (!kv) {
			free(s);
			return -1;
		}
		env->kv = kv;
		env->cap = cap;
	}
	env->kv[env->n++] = s;
	return 0;
}

const char *ddpenv_env_get(const struct ddpenv_env *env, const char *key)
{
	ssize_t i = find(env, key, strlen(key));

	return i < 0 ? NULL : env->kv[i] + strlen(key) + 1;
}

int ddpenv_env_from_envp(struct ddpenv_env *env, char *const *envp)
{
	for (; envp && *envp; envp++) {
		const char *eq = strchr(*envp, '=');
		char key[256];
		size_t klen;

		if (!eq || eq == *envp)
			continue;
		klen = (size_t)(eq - *envp);
		if (klen >= sizeof(key))
			continue; /* no variable we read is that long */
		memcpy(key, *envp, klen);
		key[klen] = '\0';
		if (ddpenv_env_set(env, key, eq + 1) < 0)
			return -1;
	}
	return 0;
}

/* A wanted name: its text and length, for bsearch. */
struct name {
	const char *s;
	size_t len;
};

static int name_cmp(const void *a, const void *b)
{
	const struct name *x = a, *y = b;
	int c = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);

	return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* Longer names are none the library or an admin's env: section reads. */
#define PICK_NAME_MAX 255
#define PICK_NAMES_MAX 1024

int ddpenv_env_pick(struct ddpenv_env *env, char *const *envp, const char *const *keys,
		    const char *const *extra, size_t maxlen, const char **bad)
{
	const char *const *lists[2] = { keys, extra };
	struct name want[PICK_NAMES_MAX];
	char key[PICK_NAME_MAX + 1];
	size_t n = 0;

	for (int i = 0; i < 2; i++)
		for (const char *const *k = lists[i]; k && *k; k++) {
			if (n == PICK_NAMES_MAX) {
				errno = EINVAL;
				return -1;
			}
			want[n++] = (struct name){ *k, strlen(*k) };
		}
	qsort(want, n, sizeof(want[0]), name_cmp);
	for (; envp && *envp; envp++) {
		const char *eq = memchr(*envp, '=', strnlen(*envp, PICK_NAME_MAX + 1));
		struct name k = { *envp, eq ? (size_t)(eq - *envp) : 0 };

		if (!k.len || !bsearch(&k, want, n, sizeof(want[0]), name_cmp))
			continue;
		memcpy(key, k.s, k.len);
		key[k.len] = '\0';
		if (find(env, key, k.len) >= 0)
			continue; /* an earlier entry's, or the caller's */
		if (strnlen(eq + 1, maxlen + 1) > maxlen) {
			*bad = *envp;
			errno = E2BIG;
			return -1;
		}
		if (ddpenv_env_set(env, key, eq + 1) < 0)
			return -1;
	}
	return 0;
}

int ddpenv_env_copy(struct ddpenv_env *dst, const struct ddpenv_env *src)
{
	ddpenv_env_free(dst);
	if (!src->n)
		return 0;
	dst->kv = malloc(src->n * sizeof(*dst->kv));
	if (!dst->kv)
		return -1;
	dst->cap = src->n;
	for (; dst->n < src->n; dst->n++) {
		dst->kv[dst->n] = strdup(src->kv[dst->n]);
		if (!dst->kv[dst->n]) {
			ddpenv_env_free(dst);
			errno = ENOMEM;
			return -1;
		}
	}
	return 0;
}

/* DDP_STEP names this step: the plugin set the task's variables. */
int ddpenv_step_marked(const struct ddpenv_env *env)
{
	const char *m = ddpenv_env_get(env, DDPENV_MARKER);
	const char *j = ddpenv_env_get(env, "SLURM_JOB_ID");
	const char *st = ddpenv_env_get(env, "SLURM_STEP_ID");
	char want[64];

	if (!st)
		st = ddpenv_env_get(env, "SLURM_STEPID");
	if (!m || !j || !st)
		return 0;
	snprintf(want, sizeof(want), "%s.%s", j, st);
	return strcmp(m, want) == 0;
}
