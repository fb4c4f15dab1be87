/*
 * nettle and libyaml, opened at their first use (dlopen), as ddp-check
 * opens NCCL, not as the plugin is loaded.  srun and every step's
 * slurmstepd load spank_ddp.so, --ddp or not: linked, OpenSSL's libcrypto
 * (the HMAC's library before nettle) and libyaml cost each of those
 * processes about 0.9 ms (most of it libcrypto's relocations, 130 page
 * faults), paid by every step of a cluster with the plugin installed.  A
 * step uses nettle only under a site's rdzv_secret, to derive its token
 * (slurmstepd) and for the store's proofs of it (the tasks), and libyaml
 * only to parse ddp.yaml where its kept parse cannot be used
 * (config_cache.c).  What is kept is sealed with its modification time
 * (seal.c), not a checksum: zlib's load took 0.06 to 0.25 ms of a --ddp
 * step's launch.
 *
 * The sonames are those of the libraries the build compiled against
 * (DDPENV_NETTLE_SONAME and DDPENV_YAML_SONAME, from mk/common.mk),
 * opened by the dynamic linker's
 * search (ld.so.cache), never a path from the job's environment:
 * slurmstepd's own environment is slurmd's.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "libs.h"

#if !defined(DDPENV_NETTLE_SONAME) || !defined(DDPENV_YAML_SONAME)
#error "DDPENV_NETTLE_SONAME and DDPENV_YAML_SONAME: set by mk/common.mk from the linker's libnettle.so and libyaml.so"
#endif

int ddpenv_lib_open(const char *soname, const char *what, const struct ddpenv_lib_sym *syms, size_t n,
		    void *table, char *err, size_t errlen)
{
	void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);

	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s (%s) cannot be opened: %.200s: expected it installed", what, soname,
			 e ? e : "no reason given");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		void *f = dlsym(h, syms[i].name);
		if (!f) {
			snprintf(err, errlen, "%s (%s) has no %s: expected the version this was built with", what,
				 soname, syms[i].name);
			dlclose(h);
			return -1;
		}
		memcpy((char *)table + syms[i].offset, &f, sizeof(f));
	}
	return 0; /* h stays open: the table points into it */
}

#define SYM(type, member, name) { name, offsetof(struct type, member) }
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A library opened at the first call that needs it, the same for the
 * next (tried once: a library missing now stays missing). */
struct lazy {
	const char *soname, *what;
	const struct ddpenv_lib_sym *syms;
	size_t n;
	void *fns;
	int tried, ok;
	char err[320];
};

static pthread_mutex_t lazy_mu = PTHREAD_MUTEX_INITIALIZER;

static const void *lazy_fns(struct lazy *l, char *err, size_t errlen)
{
	int ok;

	pthread_mutex_lock(&lazy_mu);
	if (!l->tried) {
		l->tried = 1;
		l->ok = ddpenv_lib_open(l->soname, l->what, l->syms, l->n, l->fns, l->err, sizeof(l->err)) == 0;
	}
	ok = l->ok;
	pthread_mutex_unlock(&lazy_mu);
	if (ok)
		return l->fns;
	snprintf(err, errlen, "%s", l->err);
	return NULL;
}

static const struct ddpenv_lib_sym nettle_syms[] = {
	SYM(ddpenv_nettle_fns, hmac_sha256_set_key, "nettle_hmac_sha256_set_key"),
	SYM(ddpenv_nettle_fns, hmac_sha256_update, "nettle_hmac_sha256_update"),
	SYM(ddpenv_nettle_fns, hmac_sha256_digest, "nettle_hmac_sha256_digest"),
	SYM(ddpenv_nettle_fns, memeql_sec, "nettle_memeql_sec"),
};
static struct ddpenv_nettle_fns nettle_fns;
static struct lazy nettle = { DDPENV_NETTLE_SONAME, "nettle", nettle_syms, COUNT(nettle_syms), &nettle_fns, 0, 0,
			      "" };

const struct ddpenv_nettle_fns *ddpenv_nettle(char *err, size_t errlen)
{
	return lazy_fns(&nettle, err, errlen);
}

static const struct ddpenv_lib_sym yaml_syms[] = {
	SYM(ddpenv_yaml_fns, parser_initialize, "yaml_parser_initialize"),
	SYM(ddpenv_yaml_fns, parser_set_input_string, "yaml_parser_set_input_string"),
	SYM(ddpenv_yaml_fns, parser_load, "yaml_parser_load"),
	SYM(ddpenv_yaml_fns, parser_delete, "yaml_parser_delete"),
	SYM(ddpenv_yaml_fns, document_get_root_node, "yaml_document_get_root_node"),
	SYM(ddpenv_yaml_fns, document_get_node, "yaml_document_get_node"),
	SYM(ddpenv_yaml_fns, document_delete, "yaml_document_delete"),
};
static struct ddpenv_yaml_fns yaml_fns;
static struct lazy yaml = { DDPENV_YAML_SONAME, "libyaml", yaml_syms, COUNT(yaml_syms), &yaml_fns, 0, 0, "" };

const struct ddpenv_yaml_fns *ddpenv_yaml(char *err, size_t errlen)
{
	return lazy_fns(&yaml, err, errlen);
}
