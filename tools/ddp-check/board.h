/* ddp-check's use of the rendezvous store as a bulletin board: every task
 * publishes its record of a phase ("rank", "probe", "coll") under its task
 * id; task 0 gathers them, bounded by a deadline, and does not wait for a
 * task whose connection closed without its record. */
#ifndef CK_BOARD_H
#define CK_BOARD_H

#include <stddef.h>

#include "ddpenv_store.h"

/* This task's record of phase, counted in. */
int ck_board_publish(struct ddpenv_store *s, const char *phase, int id, const char *buf, size_t len,
		     char *err, size_t errlen);

/* Task 0: wait until want records of phase are in (or the deadline), then
 * hand each present one to fn.  With gone (n bytes; want is every task
 * then), tasks whose connection closed without the record are marked there
 * (CK_GONE_DIED or CK_GONE_LEFT) and not waited for.  0, else -1. */
int ck_board_gather(struct ddpenv_store *s, const char *phase, int n, int want, double deadline,
		    unsigned char *gone, void (*fn)(void *, int, const char *, size_t), void *ctx,
		    char *err, size_t errlen);

#endif
