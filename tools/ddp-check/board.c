/* The store as a bulletin board (board.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "board.h"
#include "check.h"
#include "self.h"

#define KEYLEN 64

int ck_board_publish(struct ddpenv_store *s, const char *phase, int id, const char *buf, size_t len,
		     char *err, size_t errlen)
{
	char key[KEYLEN];
	int64_t v;
	snprintf(key, sizeof(key), "ck/%s/%d", phase, id);
	if (ddpenv_store_set(s, key, buf, len, err, errlen) < 0)
		return -1;
	snprintf(key, sizeof(key), "ck/in/%s/%d", phase, id);
	if (ddpenv_store_add(s, key, 1, &v, err, errlen) < 0)
		return -1;
	snprintf(key, sizeof(key), "ck/count/%s", phase);
	return ddpenv_store_add(s, key, 1, &v, err, errlen);
}

/* The tasks whose connection to the store closed (died, or left: a task
 * leaves after its last record, or on an error of its own) without
 * phase's record: marked in gone; how many, or -1. */
static int unreported(struct ddpenv_store *s, const char *phase, int n, unsigned char *gone,
		      char *err, size_t errlen)
{
	int *ids = malloc((size_t)n * sizeof(*ids)), found = 0;
	if (!ids) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (int how = CK_GONE_DIED; how <= CK_GONE_LEFT; how++) {
		int k = how == CK_GONE_DIED ? ddpenv_store_dead_ranks(s, ids, n, err, errlen) :
					      ddpenv_store_left_ranks(s, ids, n, err, errlen);
		if (k < 0) {
			free(ids);
			return -1;
		}
		for (int i = 0; i < k && i < n; i++) {
			char key[KEYLEN];
			int64_t in;
			if (ids[i] <= 0 || ids[i] >= n)   /* (task 0 is this one) */
				continue;
			snprintf(key, sizeof(key), "ck/in/%s/%d", phase, ids[i]);
			if (ddpenv_store_add(s, key, 0, &in, err, errlen) < 0) {
				free(ids);
				return -1;
			}
			if (!in) {
				if (!gone[ids[i]])
					gone[ids[i]] = (unsigned char)how;
				found++;
			}
		}
	}
	free(ids);
	return found;
}

/* Task 0: wait until want records of phase are in (or the deadline), then
 * hand each present one to fn.  Never a get that could time out: the count
 * is polled, and a record is fetched only once it exists.  With gone (want
 * is every task then), it also asks the store every half second which tasks
 * closed their connection without the record: those are marked there and
 * not waited for (a killed task no longer holds the report for --timeout). */
int ck_board_gather(struct ddpenv_store *s, const char *phase, int n, int want, double deadline,
		    unsigned char *gone, void (*fn)(void *, int, const char *, size_t), void *ctx,
		    char *err, size_t errlen)
{
	char key[KEYLEN];
	int64_t cnt = 0;
	double look = ck_mono() + 0.5;
	snprintf(key, sizeof(key), "ck/count/%s", phase);
	for (;;) {
		if (ddpenv_store_add(s, key, 0, &cnt, err, errlen) < 0)
			return -1;
		if (cnt >= want || ck_mono() > deadline)
			break;
		if (gone && ck_mono() > look) {
			int k = unreported(s, phase, n, gone, err, errlen);
			if (k < 0)
				return -1;
			if (cnt + k >= want)
				break;
			look = ck_mono() + 0.5;
		}
		usleep(cnt + 1 >= want ? 2000 : 20000);
	}
	for (int id = 0; id < n; id++) {
		int64_t in;
		void *v;
		size_t l;
		snprintf(key, sizeof(key), "ck/in/%s/%d", phase, id);
		if (ddpenv_store_add(s, key, 0, &in, err, errlen) < 0)
			return -1;
		if (!in)
			continue;
		snprintf(key, sizeof(key), "ck/%s/%d", phase, id);
		if (ddpenv_store_get(s, key, 5000, &v, &l, err, errlen) < 0)
			return -1;
		fn(ctx, id, v, l);
		free(v);
	}
	return 0;
}
