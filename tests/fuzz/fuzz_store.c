/* libFuzzer target: the rendezvous store's server as a peer on the network
 * drives it (any host that reaches MASTER_PORT can send it bytes).  The
 * server's own code is included, so that its framing (on_readable) and
 * request handling run on real sockets, without its thread or epoll: two
 * connections are socket pairs whose far ends the input writes to.
 *
 * Input: a byte of options (bit 0: the store has a token, "s3cret"; bits
 * 1-3: world size - 1), then chunks: a byte (bit 0: which connection, bit
 * 1: that connection closes after the chunk, bit 2: the chunk is preceded
 * by the PROOF the connection's handshake wants, made with the token, so
 * that inputs get past the handshake as a rank with the token does), a
 * 2-byte big-endian length, that many bytes.  After each chunk the server
 * reads what arrived and answers; every answer must be whole frames of a
 * reply op, the server's books must match what it holds (check_books),
 * and it must never crash, leak or hang. */
/* a cap an input of 8 KB can reach */
#define STORE_MAX_BYTES 4096ull
#define STORE_MAX_BYTES_TEXT "4 KiB"
#include "../../libddpenv/src/store_server.c"

#include <assert.h>
#include <fcntl.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read what the server sent on fd and check it is whole reply frames:
 * each a length, an op of the replies, and that op's fields. */
static void check_replies(int fd, uint8_t *buf, size_t cap, size_t *have)
{
	ssize_t n;
	while (*have < cap && (n = recv(fd, buf + *have, cap - *have, MSG_DONTWAIT)) > 0)
		*have += (size_t)n;
	size_t off = 0;
	while (*have - off >= 4) {
		uint32_t len = proto_get_u32(buf + off);
		assert(len >= 1 && len <= STORE_MAX_FRAME + 16);
		if (*have - off - 4 < len)
			break;
		const uint8_t *f = buf + off + 4;
		switch (f[0]) {
		case REP_OK:
			assert(len == 1);
			break;
		case REP_INT:
			assert(len == 9);
			break;
		case REP_VALUE:
		case REP_ERR:
			assert(len >= 5 && proto_get_u32(f + 1) == len - 5);
			break;
		case REP_RANKS:
			assert(len >= 5 && proto_get_u32(f + 1) * (size_t)4 == len - 5);
			break;
		case REP_CHALLENGE:
			/* protocol, nonce, and a proof where the store has a token */
			assert((len == 45 || len == 77) && proto_get_u32(f + 1) == STORE_PROTO &&
			       proto_get_u32(f + 5) == STORE_NONCE_LEN && proto_get_u32(f + 41) == len - 45);
			break;
		default:
			assert(!"a reply op the protocol does not have");
		}
		off += 4 + len;
	}
	memmove(buf, buf + off, *have - off);
	*have -= off;
}

/* Rank 0's log of refused clients: one line, within its buffer. */
static void logged(void *ctx, const char *msg)
{
	(void)ctx;
	assert(strlen(msg) < 256 && !strchr(msg, '\n'));
}

/* The server's books against what it holds: the bytes of its keys and
 * values within the cap, each open connection's count of waiting GETs
 * that of its waiters and within the limit; no waiter of a closed one
 * (c[i] NULL).  Returns the waiters in all. */
static size_t check_books(struct store_server *sv, struct conn *const c[2])
{
	unsigned long long bytes = 0;
	size_t waiters = 0, mine[2] = { 0, 0 };
	for (int b = 0; b < NBUCKET; b++)
		for (struct kv *e = sv->bucket[b]; e; e = e->next) {
			bytes += key_cost(strlen(e->key)) + e->len;
			for (struct waiter *w = e->waiters; w; w = w->next) {
				int owner = -1;
				for (int i = 0; i < 2; i++)
					if (c[i] && c[i]->fd == w->fd && c[i]->gen == w->gen)
						owner = i;
				assert(owner >= 0);   /* a closed connection's were dropped */
				mine[owner]++;
				waiters++;
			}
		}
	assert(bytes == sv->bytes && bytes <= STORE_MAX_BYTES);
	unsigned pending = 0;
	for (struct conn *p = sv->pending_head; p; p = p->next)
		pending++;
	assert(pending == sv->npending && pending <= 2);
	for (int i = 0; i < 2; i++) {
		assert(!c[i] || ((size_t)c[i]->waiting == mine[i] && c[i]->waiting <= MAX_WAITING));
		/* a rank only once proven, and only then past a handshake frame */
		assert(!c[i] || (c[i]->rank >= 0) == (c[i]->hs == HS_JOINED));
		assert(!c[i] || c[i]->hs == HS_JOINED || c[i]->in_len <= STORE_PREAUTH_FRAME + 4);
	}
	return waiters;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t rbuf[2][1 << 16];
	if (size < 1)
		return 0;
	int world = 1 + (data[0] >> 1 & 7);
	char err[128];
	struct store_server *sv = server_new(world, data[0] & 1 ? "s3cret" : NULL, logged, NULL,
					     err, sizeof(err));
	assert(sv);

	struct conn *c[2];
	int peer[2];
	size_t have[2] = { 0, 0 };
	for (int i = 0; i < 2; i++) {
		int sp[2];
		assert(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
		assert(sp[0] < sv->nconns_cap);
		fcntl(sp[0], F_SETFL, O_NONBLOCK);
		c[i] = calloc(1, sizeof(*c[i]));
		assert(c[i]);
		c[i]->fd = sp[0];
		c[i]->gen = ++sv->next_gen;
		c[i]->rank = -1;
		sv->conns[sp[0]] = c[i];
		pending_add(sv, c[i]);
		peer[i] = sp[1];
	}

	size_t p = 1;
	while (p + 3 <= size) {
		int k = data[p] & 1, close_after = data[p] >> 1 & 1, prove = data[p] >> 2 & 1;
		size_t len = (size_t)data[p + 1] << 8 | data[p + 2];
		p += 3;
		if (len > size - p)
			len = size - p;
		if (c[k] && prove && c[k]->hs == HS_CHALLENGED) {
			uint8_t f[4 + 1 + 4 + STORE_PROOF_LEN];
			proto_put_u32(f, 1 + 4 + STORE_PROOF_LEN);
			f[4] = OP_PROOF;
			proto_put_u32(f + 5, STORE_PROOF_LEN);
			assert(store_proof("s3cret", STORE_CLIENT, c[k]->cnonce, c[k]->snonce, c[k]->claim_rank,
					   c[k]->claim_world, f + 9) == 0);
			assert(send(peer[k], f, sizeof(f), MSG_NOSIGNAL) == (ssize_t)sizeof(f));
		}
		if (c[k] && len) {
			/* a socket pair takes far more than an input's 8 KB */
			assert(send(peer[k], data + p, len, MSG_NOSIGNAL) == (ssize_t)len);
			if (on_readable(sv, c[k]) < 0) {
				conn_close(sv, c[k]);
				c[k] = NULL;
			}
		}
		p += len;
		/* answers to either connection (a SET answers the other's GET) */
		for (int i = 0; i < 2; i++)
			if (c[i])
				flush(c[i]);
		for (int i = 0; i < 2; i++)
			check_replies(peer[i], rbuf[i], sizeof(rbuf[i]), &have[i]);
		if (close_after && c[k]) {
			conn_close(sv, c[k]);
			c[k] = NULL;
		}
		check_books(sv, c);
	}
	for (int i = 0; i < 2; i++) {
		if (c[i])
			conn_close(sv, c[i]);
		c[i] = NULL;
		close(peer[i]);
	}
	assert(check_books(sv, c) == 0);
	/* every rank that joined has left (said BYE, or its connection
	 * closed: died) once no connection is open, or the server's stop
	 * would wait its whole timeout for a rank that cannot come back; and
	 * the count it waits on never passes the world */
	for (int r = 0; r < world; r++)
		assert(!sv->joined[r] || sv->left[r]);
	assert(sv->nleft <= sv->world);
	ddpenv_store_server_stop(sv, 0);
	return 0;
}
