/* ddp-check's command line: the options into struct ck_opts, --help and
 * --version.  One table (opts.c) holds every numeric option with its
 * bounds, so each is parsed and refused the same way. */
#ifndef CK_OPTS_H
#define CK_OPTS_H

#include "check.h"

struct ck_cli {
	struct ck_opts o;
	const char *backend;             /* --backend, or NULL: DDP_BACKEND */
	int json;
	int node;                        /* --node: this node alone (node.h) */
	int drain;                       /* --drain: a failure drains it */
};

/* -1: go on and run; else the exit status (0 after --help or --version,
 * 2 on a usage error, said on stderr naming the option and what it takes). */
int ck_cli_parse(int argc, char **argv, struct ck_cli *cli);

/* A decimal integer within lo..hi, the whole string: 0, else -1. */
int ck_parse_int(const char *s, long lo, long hi, long *out);

#endif
