/* What ddp-check's verdict files (eval*.c) share: the growing message a
 * check names its culprits in, and the tasks grouped by node.  Private to
 * them; check.h is the interface. */
#ifndef CK_EVAL_H
#define CK_EVAL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MAX_NAMED 8   /* tasks named in one message before "and N more" */

/* A growing message: "a; b; c; and 4 more". */
struct msg {
	char s[CK_MSG];
	size_t off;
	int items, dropped;
};

static inline void ck_say(struct msg *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static inline void ck_say(struct msg *m, const char *fmt, ...)
{
	va_list ap;

	if (m->items >= MAX_NAMED || m->off >= sizeof(m->s) - 64) {
		m->dropped++;
		return;
	}
	if (m->items++ && m->off < sizeof(m->s))
		m->off += (size_t)snprintf(m->s + m->off, sizeof(m->s) - m->off, "; ");
	va_start(ap, fmt);
	if (m->off < sizeof(m->s))
		m->off += (size_t)vsnprintf(m->s + m->off, sizeof(m->s) - m->off, fmt, ap);
	va_end(ap);
	if (m->off >= sizeof(m->s))
		m->off = sizeof(m->s) - 1;
}

static inline const char *ck_said(struct msg *m)
{
	if (m->dropped && m->off < sizeof(m->s))
		snprintf(m->s + m->off, sizeof(m->s) - m->off, "; and %d more", m->dropped);
	return m->s;
}

/* Where a check looked: "in this step", or under --node "on this node". */
static inline const char *ck_scope(const struct ck_world *w)
{
	return w->node_mode ? "on this node" : "in this step";
}

static inline int ck_has(const struct ck_rank *r, enum ck_env k)
{
	return r->joined && (r->have & (1u << k));
}

/* An integer variable: 1 with *v set when it is a non-negative integer. */
static inline int ck_intval(const struct ck_rank *r, enum ck_env k, long *v)
{
	char *end;

	if (!ck_has(r, k) || !r->env[k][0])
		return 0;
	*v = strtol(r->env[k], &end, 10);
	return *end == 0 && *v >= 0;
}

/* The node a task ran on, numbered in order of first appearance. */
static inline int ck_node_of(const struct ck_world *w, int id, char (*nodes)[CK_HOST], int *nn)
{
	for (int i = 0; i < *nn; i++)
		if (!strcmp(nodes[i], w->ranks[id].host))
			return i;
	snprintf(nodes[*nn], CK_HOST, "%s", w->ranks[id].host);
	return (*nn)++;
}

struct nodes {
	int n;
	char (*name)[CK_HOST];
	int *of;        /* [w->n]: node of each joined task, -1 otherwise */
	int *first;     /* [n]: first task of the node */
	int *count;     /* [n] */
};

static inline int ck_nodes_build(const struct ck_world *w, struct nodes *nd)
{
	memset(nd, 0, sizeof(*nd));
	nd->name = calloc((size_t)w->n + 1, sizeof(*nd->name));
	nd->of = calloc((size_t)w->n + 1, sizeof(int));
	nd->first = calloc((size_t)w->n + 1, sizeof(int));
	nd->count = calloc((size_t)w->n + 1, sizeof(int));
	if (!nd->name || !nd->of || !nd->first || !nd->count)
		return -1;
	for (int i = 0; i < w->n; i++) {
		nd->of[i] = -1;
		if (!w->ranks[i].joined)
			continue;
		int before = nd->n;
		nd->of[i] = ck_node_of(w, i, nd->name, &nd->n);
		if (nd->n > before)
			nd->first[nd->of[i]] = i;
		nd->count[nd->of[i]]++;
	}
	return 0;
}

static inline void ck_nodes_free(struct nodes *nd)
{
	free(nd->name);
	free(nd->of);
	free(nd->first);
	free(nd->count);
}

static inline int ck_all_joined(const struct ck_world *w)
{
	for (int i = 0; i < w->n; i++)
		if (!w->ranks[i].joined)
			return 0;
	return 1;
}

/* The checks of each family, in the order they are reported. */
void ck_eval_contract(struct ck_world *w, const struct nodes *nd);
void ck_eval_net(struct ck_world *w, const struct nodes *nd);
void ck_eval_bind(struct ck_world *w, const struct nodes *nd);
void ck_eval_hw(struct ck_world *w, const struct nodes *nd);
/* hw.h2d: each task's copies to its GPU against its PCIe link (eval_h2d.c). */
void ck_eval_h2d(struct ck_world *w);
/* gpu.p2p_bw: the copies between each node's GPUs (eval_p2p_bw.c). */
void ck_eval_p2p_bw(struct ck_world *w);
void ck_eval_gpu(struct ck_world *w, const struct nodes *nd);
void ck_eval_p2p(struct ck_world *w, const struct nodes *nd);

#endif
