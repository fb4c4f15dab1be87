/* The environment snapshot: set, get, unset, from an envp array, copied. */
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
	test_copy();
	return test_report();
}
