/* A recorded healthy run (ddp-check --json's report, kept by the admin)
 * that a later run's bandwidth is compared with (--baseline): not fixed
 * thresholds, this cluster's own figures. */
#ifndef CK_BASELINE_H
#define CK_BASELINE_H

#include <stddef.h>

#define CK_BASE_SIZES 64

struct ck_baseline {
	char backend[8];
	int world_size, nodes;
	size_t n;                        /* rows of its bandwidth table */
	size_t size[CK_BASE_SIZES];      /* bytes */
	double busbw[CK_BASE_SIZES];     /* GB/s */
};

/* Read path (a JSON object as ddp-check --json writes it): 0, else -1
 * with err naming the file and what was expected. */
int ck_baseline_read(const char *path, struct ck_baseline *b, char *err, size_t errlen);

#endif
