/* A variable of the job's environment, in slurmstepd: see ddp.h. */
#include <stdio.h>
#include <stdlib.h>

#include "ddp.h"

/* Some values are long: task/affinity's SLURM_CPU_BIND holds a mask per
 * task (128 tasks of a 256-CPU node: 8 KiB), a --cpu-bind=map_cpu list
 * whatever the user wrote; none is read past this. */
#define GETENV_MAX (1u << 20)

int ddp_getenv(spank_t sp, const char *key, char **out, char *err, size_t errlen)
{
	size_t len = 4096;
	char *buf = NULL;
	spank_err_t rc;

	*out = NULL;
	for (;;) {
		char *b = realloc(buf, len);
		if (!b) {
			free(buf);
			snprintf(err, errlen, "out of memory reading %s", key);
			return -1;
		}
		buf = b;
		rc = spank_getenv(sp, key, buf, (int)len);
		if (rc != ESPANK_NOSPACE || len >= GETENV_MAX)
			break;
		len *= 4;
	}
	if (rc == ESPANK_SUCCESS) {
		*out = buf;
		return 0;
	}
	free(buf);
	if (rc == ESPANK_ENV_NOEXIST)
		return 0;
	snprintf(err, errlen, "%s: value longer than %zu bytes or unreadable: %s", key, len - 1,
		 spank_strerror(rc));
	return -1;
}
