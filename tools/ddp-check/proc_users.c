/* The threads a user runs on this node, from /proc (check.h:
 * ck_user_threads): what the process limit, RLIMIT_NPROC, is held against
 * at every fork and pthread_create. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

long long ck_user_threads(const char *proc, long uid)
{
	DIR *d = opendir(proc);
	long long n = 0;

	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));) {
		char path[PATH_MAX], line[256];
		long real = -1, threads = -1;
		FILE *f;
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "%s/%s/status", proc, e->d_name);
		/* gone since the listing, or another user's under hidepid */
		if (!(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof(line), f) && (real < 0 || threads < 0))
			if (!strncmp(line, "Uid:", 4))
				real = strtol(line + 4, NULL, 10);
			else if (!strncmp(line, "Threads:", 8))
				threads = strtol(line + 8, NULL, 10);
		fclose(f);
		if (real == uid && threads > 0)
			n += threads;
	}
	closedir(d);
	return n;
}
