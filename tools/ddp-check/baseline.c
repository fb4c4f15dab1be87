/* --baseline's file: ddp-check --json's report, read with libyaml (JSON
 * is YAML) (baseline.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "baseline.h"

/* A baseline is small: its report's text, at most this many bytes. */
#define BASE_MAX (1 << 20)

/* The value node of key in mapping m, NULL none. */
static yaml_node_t *member(yaml_document_t *d, yaml_node_t *m, const char *key)
{
	if (!m || m->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(d, p->key);
		if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
			return yaml_document_get_node(d, p->value);
	}
	return NULL;
}

static const char *scalar(yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* The bandwidth table's rows: size and busbw each.  0, else -1. */
static int rows(yaml_document_t *d, yaml_node_t *t, struct ck_baseline *b)
{
	if (!t || t->type != YAML_SEQUENCE_NODE)
		return -1;
	for (yaml_node_item_t *i = t->data.sequence.items.start; i < t->data.sequence.items.top; i++) {
		yaml_node_t *row = yaml_document_get_node(d, *i);
		const char *s = scalar(member(d, row, "size")), *bw = scalar(member(d, row, "busbw"));
		if (!s || !bw)
			return -1;
		if (b->n < CK_BASE_SIZES) {
			b->size[b->n] = (size_t)strtoull(s, NULL, 10);
			b->busbw[b->n] = strtod(bw, NULL);
			b->n++;
		}
	}
	return 0;
}

int ck_baseline_read(const char *path, struct ck_baseline *b, char *err, size_t errlen)
{
	struct stat st;
	yaml_parser_t p;
	yaml_document_t d;
	int rv = -1;

	memset(b, 0, sizeof(*b));
	FILE *f = fopen(path, "re");
	if (!f || fstat(fileno(f), &st) != 0) {
		snprintf(err, errlen, "--baseline %s: cannot read it: %m", path);
		if (f)
			fclose(f);
		return -1;
	}
	if (st.st_size > BASE_MAX) {
		snprintf(err, errlen, "--baseline %s: %lld bytes: expected a ddp-check --json report (at most %d)",
			 path, (long long)st.st_size, BASE_MAX);
		fclose(f);
		return -1;
	}
	yaml_parser_initialize(&p);
	yaml_parser_set_input_file(&p, f);
	if (!yaml_parser_load(&p, &d)) {
		snprintf(err, errlen, "--baseline %s: line %zu: %s: expected a ddp-check --json report", path,
			 p.problem_mark.line + 1, p.problem ? p.problem : "not JSON");
		yaml_parser_delete(&p);
		fclose(f);
		return -1;
	}
	yaml_node_t *root = yaml_document_get_root_node(&d);
	const char *ws = scalar(member(&d, root, "world_size")), *nodes = scalar(member(&d, root, "nodes"));
	const char *be = scalar(member(&d, root, "backend"));
	if (!ws || !be || rows(&d, member(&d, root, "bandwidth"), b) < 0) {
		snprintf(err, errlen, "--baseline %s: expected a ddp-check --json report (world_size, backend "
			 "and a bandwidth table of size and busbw)", path);
	} else if (b->n == 0) {
		snprintf(err, errlen, "--baseline %s: its bandwidth table is empty (recorded with -e 0?): "
			 "record it with a sweep", path);
	} else {
		b->world_size = atoi(ws);
		b->nodes = nodes ? atoi(nodes) : 0;
		snprintf(b->backend, sizeof(b->backend), "%s", be);
		rv = 0;
	}
	yaml_document_delete(&d);
	yaml_parser_delete(&p);
	fclose(f);
	return rv;
}
