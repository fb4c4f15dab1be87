/* A temporary folder of a test's own (tmp, made by the test's main) and
 * files in it: put writes one, dirs makes a path of folders. */
#ifndef DDP_TMPTREE_H
#define DDP_TMPTREE_H

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static char tmp[256];

static inline void put(const char *rel, const char *text)
{
	char p[600];
	snprintf(p, sizeof(p), "%s/%s", tmp, rel);
	FILE *f = fopen(p, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* mkdir -p tmp/rel */
static inline void dirs(const char *rel)
{
	char p[600];
	int n = snprintf(p, sizeof(p), "%s/%s", tmp, rel);
	for (int i = (int)strlen(tmp) + 1; i <= n; i++)
		if (p[i] == '/' || p[i] == '\0') {
			char c = p[i];
			p[i] = '\0';
			mkdir(p, 0755);
			p[i] = c;
		}
}

#endif
