/* The environment snapshot: set, get, unset, from an envp array, picked
 * from one, copied. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddpenv.h"
#include "test.h"

static void test_set_get_unset(void)
{
	struct ddpenv_env env;

	ddpenv_env_init(&env);
	test_cond("a new key is set", ddpenv_env_set(&env, "RANK", "3") == 0);
	test_streq("... and read back", ddpenv_env_get(&env, "RANK"), "3");
	test_cond("a key is replaced, not added", ddpenv_env_set(&env, "RANK", "4") == 0 && env.n == 1);
	test_streq("... its new value read", ddpenv_env_get(&env, "RANK"), "4");
	test_cond("a prefix is another key", ddpenv_env_get(&env, "RAN") == NULL);
	test_cond("a key with '=' is refused", ddpenv_env_set(&env, "A=B", "1") < 0);
	test_cond("an empty key is refused", ddpenv_env_set(&env, "", "1") < 0);
	ddpenv_env_unset(&env, "RANK");
	test_cond("unset removes it", ddpenv_env_get(&env, "RANK") == NULL && env.n == 0);
	ddpenv_env_unset(&env, "RANK");
	test_cond("unset of an absent key changes nothing", env.n == 0);
	ddpenv_env_free(&env);
}

static void test_from_envp(void)
{
	char long_key[300 + 3];
	char *envp[] = { "A=1", "noequals", "=x", "B==2", long_key, NULL };
	struct ddpenv_env env;

	memset(long_key, 'K', 300);
	memcpy(long_key + 300, "=v", 3);
	ddpenv_env_init(&env);
	test_cond("an envp array is copied", ddpenv_env_from_envp(&env, envp) == 0);
	test_cond("... entries without a name or '=' and keys of 256 bytes or more left out",
		  env.n == 2);
	test_streq("... a value", ddpenv_env_get(&env, "A"), "1");
	test_streq("... a value that starts with '='", ddpenv_env_get(&env, "B"), "=2");
	ddpenv_env_free(&env);
}

static void test_pick(void)
{
	static const char *const keys[] = { "RANK", "MASTER_ADDR", "WORLD_SIZE", NULL };
	static const char *const extra[] = { "NCCL_IB_HCA", NULL };
	char long_key[300 + 3], big[64 + 3];
	char *envp[] = { "PATH=/usr/bin", "RANKX=9", "RAN=8", "RANK=1", "noequals", "=x", "RANK=2",
			 "MASTER_ADDR==h", long_key, "NCCL_IB_HCA=mlx5", "WORLD_SIZE=4", big, NULL };
	struct ddpenv_env env;
	const char *bad = NULL;

	memset(long_key, 'K', 300);
	memcpy(long_key + 300, "=v", 3);
	memset(big, 'b', sizeof(big));
	memcpy(big, "BIG=", 4);
	big[sizeof(big) - 1] = '\0';
	ddpenv_env_init(&env);
	ddpenv_env_set(&env, "WORLD_SIZE", "mine");
	test_cond("the names asked picked in one pass", ddpenv_env_pick(&env, envp, keys, extra, 16, &bad) == 0);
	test_cond("... only those: the names asked and the one held before", env.n == 4);
	test_streq("... a name's first entry, as getenv finds it", ddpenv_env_get(&env, "RANK"), "1");
	test_cond("... no name that only starts with one asked, nor a prefix of one",
		  !ddpenv_env_get(&env, "RANKX") && !ddpenv_env_get(&env, "RAN"));
	test_streq("... a value that starts with '='", ddpenv_env_get(&env, "MASTER_ADDR"), "=h");
	test_streq("... a name of the extra list", ddpenv_env_get(&env, "NCCL_IB_HCA"), "mlx5");
	test_streq("... a name held before kept", ddpenv_env_get(&env, "WORLD_SIZE"), "mine");
	test_cond("... a long value of a name not asked is no error", bad == NULL);
	ddpenv_env_free(&env);

	static const char *const want_big[] = { "BIG", NULL };
	test_cond("a value asked over its bound refused",
		  ddpenv_env_pick(&env, envp, keys, want_big, 16, &bad) < 0 && errno == E2BIG);
	test_cond("... the entry named", bad == big);
	ddpenv_env_free(&env);
	test_cond("the same value within its bound picked",
		  ddpenv_env_pick(&env, envp, want_big, NULL, sizeof(big), &bad) == 0 &&
		  ddpenv_env_get(&env, "BIG") && strlen(ddpenv_env_get(&env, "BIG")) == sizeof(big) - 5);
	ddpenv_env_free(&env);
	test_cond("no environment: nothing picked", ddpenv_env_pick(&env, NULL, keys, extra, 16, &bad) == 0 &&
		  env.n == 0);

	static const char *many[1026];
	for (int i = 0; i < 1025; i++)
		many[i] = "K";
	many[1025] = NULL;
	test_cond("over 1,024 names asked refused", ddpenv_env_pick(&env, envp, many, NULL, 16, &bad) < 0 &&
		  errno == EINVAL);
	ddpenv_env_free(&env);
}

/* ddpenv_env_pick against a name-by-name lookup (spank_getenv's way):
 * 600 entries, the library's own names and others, some twice. */
static void test_pick_as_getenv(void)
{
	static char store[600][48];
	char *envp[601];
	struct ddpenv_env env;
	const char *bad = NULL;
	size_t nkeys = 0;
	int same = 1;

	while (ddpenv_env_keys[nkeys])
		nkeys++;
	srand(7);
	for (int i = 0; i < 600; i++) {
		if (rand() % 3)
			snprintf(store[i], sizeof(store[i]), "OTHER_%d=%d", i % 50, i);
		else
			snprintf(store[i], sizeof(store[i]), "%s=%d", ddpenv_env_keys[rand() % nkeys], i);
		envp[i] = store[i];
	}
	envp[600] = NULL;
	ddpenv_env_init(&env);
	test_cond("600 entries picked", ddpenv_env_pick(&env, envp, ddpenv_env_keys, NULL, 64, &bad) == 0);
	for (size_t k = 0; k < nkeys; k++) {
		size_t len = strlen(ddpenv_env_keys[k]);
		const char *first = NULL;
		for (int i = 0; i < 600 && !first; i++)
			if (!strncmp(envp[i], ddpenv_env_keys[k], len) && envp[i][len] == '=')
				first = envp[i] + len + 1;
		const char *got = ddpenv_env_get(&env, ddpenv_env_keys[k]);
		same &= (!first && !got) || (first && got && !strcmp(first, got));
	}
	test_cond("... each of the library's names as a lookup of its first entry finds it", same);
	test_cond("... no other name", ddpenv_env_get(&env, "OTHER_1") == NULL);
	ddpenv_env_free(&env);
}

static void test_copy(void)
{
	struct ddpenv_env src, dst;
	char key[16];

	ddpenv_env_init(&src);
	ddpenv_env_init(&dst);
	test_cond("a copy of an empty snapshot is empty", ddpenv_env_copy(&dst, &src) == 0 && dst.n == 0);
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "K%d", i);
		ddpenv_env_set(&src, key, key + 1);
	}
	ddpenv_env_set(&dst, "OLD", "x");
	test_cond("40 entries copied over an earlier content", ddpenv_env_copy(&dst, &src) == 0 && dst.n == 40);
	test_cond("... the earlier content gone", ddpenv_env_get(&dst, "OLD") == NULL);
	int same = 1;
	for (int i = 0; i < 40; i++) {
		snprintf(key, sizeof(key), "K%d", i);
		const char *v = ddpenv_env_get(&dst, key);
		same &= v && strcmp(v, key + 1) == 0;
	}
	test_cond("... every value as in the source", same);
	test_cond("... strings of its own", dst.kv[0] != src.kv[0]);
	ddpenv_env_set(&dst, "K0", "changed");
	ddpenv_env_set(&dst, "NEW", "1");
	test_streq("a change to the copy leaves the source", ddpenv_env_get(&src, "K0"), "0");
	test_cond("... and an added key too", ddpenv_env_get(&src, "NEW") == NULL && src.n == 40);
	ddpenv_env_free(&src);
	ddpenv_env_free(&dst);
}

int main(void)
{
	test_set_get_unset();
	test_from_envp();
	test_pick();
	test_pick_as_getenv();
	test_copy();
	return test_report();
}
