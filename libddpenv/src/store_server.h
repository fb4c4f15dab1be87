/* The rendezvous store's server half, started by rank 0's ddpenv_store_open. */
#ifndef DDPENV_STORE_SERVER_H
#define DDPENV_STORE_SERVER_H

#include <stddef.h>

#include "ddpenv_store.h"

struct store_server;

struct store_server *ddpenv_store_server_start(int port, int world, const char *token,
					       void (*log)(void *, const char *), void *log_ctx,
					       char *err, size_t errlen);
/* Wait up to wait_ms for every rank to leave, then stop and free. */
void ddpenv_store_server_stop(struct store_server *sv, int wait_ms);
/* The clients refused so far, by reason. */
void ddpenv_store_server_refusals(const struct store_server *sv, struct ddpenv_store_refusals *out);

#endif
