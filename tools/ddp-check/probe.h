/* ddp-check's TCP probe mesh and clock comparison. */
#ifndef DDP_CHECK_PROBE_H
#define DDP_CHECK_PROBE_H

#include <pthread.h>

#include "check.h"

/* The largest full-size reply a prober takes (IPoIB's MTU is 65520). */
#define CK_PROBE_BULK 65536

/* A node's listener: greets each connection with "ddp-check HOST\n",
 * answers a 'B' byte with one TCP segment of the connection's MSS (its
 * length in the first 4 bytes, big-endian: a packet of the path's full
 * size) and each 'T' byte with its CLOCK_REALTIME (8 bytes, big-endian
 * ns). */
struct ck_listener {
	int fd;
	pthread_t th;
	int running;
	int stop;
	char host[CK_HOST];
	char endpoint[80];   /* "10.0.0.1:40123", "[fd00::1]:40123" */
};

/* Listen on addr (numeric), any free port. */
int ck_listen_start(struct ck_listener *l, const char *addr, const char *host, char *err,
		    size_t errlen);
void ck_listen_stop(struct ck_listener *l);

struct ck_target {
	char node[CK_HOST];
	char addr[80];
	int head;            /* the head's node: measure the clock against it */
};

/* Connect to every target, at most BATCH at a time, each bounded by ms;
 * out gets one ck_peer per target (free with ck_probe_free). */
int ck_probe_run(const struct ck_target *t, size_t n, int ms, struct ck_probe *out);

#endif
