/* A tiny test harness: TAP lines, non-zero exit on any failure. */
#ifndef DDP_TEST_H
#define DDP_TEST_H

#include <stdio.h>
#include <string.h>

static int t_num, t_fail;

#define test_cond(desc, cond) do {                                        \
	t_num++;                                                          \
	if (cond) {                                                       \
		printf("ok %d - %s\n", t_num, desc);                      \
	} else {                                                          \
		t_fail++;                                                 \
		printf("not ok %d - %s (%s:%d)\n", t_num, desc, __FILE__, __LINE__); \
	}                                                                 \
} while (0)

#define test_streq(desc, got, want) do {                                  \
	const char *g_ = (got), *w_ = (want);                             \
	int ok_ = g_ && w_ && strcmp(g_, w_) == 0;                        \
	test_cond(desc, ok_);                                             \
	if (!ok_)                                                         \
		printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
} while (0)

/* err must name every fragment */
#define test_err(desc, err, frag) do {                                    \
	int ok_ = strstr((err), (frag)) != NULL;                          \
	test_cond(desc, ok_);                                             \
	if (!ok_)                                                         \
		printf("#   error '%s' lacks '%s'\n", (err), (frag));         \
} while (0)

#define test_report() (printf("1..%d\n", t_num), t_fail ? 1 : 0)

#endif
