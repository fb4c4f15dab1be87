/* libs.c: nettle and libyaml, opened at their first use.  Internal; not part of the API. */
#ifndef DDPENV_LIBS_H
#define DDPENV_LIBS_H

#include <stddef.h>
#include <stdint.h>

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <yaml.h>

/* What libddpenv calls of nettle (the step's token in slurmstepd, the
 * store's proofs in the tasks: hmac.c).  nettle's names are macros of the
 * exported nettle_ ones. */
struct ddpenv_nettle_fns {
	__typeof__(nettle_hmac_sha256_set_key) *hmac_sha256_set_key;
	__typeof__(nettle_hmac_sha256_update) *hmac_sha256_update;
	__typeof__(nettle_hmac_sha256_digest) *hmac_sha256_digest;
	__typeof__(nettle_memeql_sec) *memeql_sec;
};

/* What libddpenv calls of libyaml. */
struct ddpenv_yaml_fns {
	__typeof__(yaml_parser_initialize) *parser_initialize;
	__typeof__(yaml_parser_set_input_string) *parser_set_input_string;
	__typeof__(yaml_parser_load) *parser_load;
	__typeof__(yaml_parser_delete) *parser_delete;
	__typeof__(yaml_document_get_root_node) *document_get_root_node;
	__typeof__(yaml_document_get_node) *document_get_node;
	__typeof__(yaml_document_delete) *document_delete;
};

/* The library's functions, opened at the first call in this process (the
 * next calls return the same); NULL with err naming the library and what
 * was expected when it cannot be opened or lacks one of them.  Safe from
 * any thread. */
const struct ddpenv_nettle_fns *ddpenv_nettle(char *err, size_t errlen);
const struct ddpenv_yaml_fns *ddpenv_yaml(char *err, size_t errlen);

/* A function of a library and where its pointer goes in a table of them. */
struct ddpenv_lib_sym {
	const char *name;
	size_t offset;
};

/* Open SONAME (WHAT says which library it is, in messages) and look up
 * each of its n SYMS into TABLE at their offsets.  0, else -1 with err. */
int ddpenv_lib_open(const char *soname, const char *what, const struct ddpenv_lib_sym *syms, size_t n,
		    void *table, char *err, size_t errlen);

#endif
