/* Wire format of the rendezvous store, shared by server and client.
 *
 * A frame is a 4-byte big-endian length (of what follows), a 1-byte op and
 * the op's fields.  Strings are a 4-byte length and the bytes; integers are
 * big-endian.
 *
 * Protocol 2.  A connection starts with the handshake (store_auth.h), in
 * frames of at most STORE_PREAUTH_FRAME bytes; the token never crosses
 * the wire:
 *   JOIN proto:u32 rank:u32 world:u32 nonce:str   -> CHALLENGE proto:u32
 *                                                    nonce:str proof:str
 *   PROOF proof:str                                -> OK
 * (a proof is empty where that side has no token).  Then requests (client
 * to server):
 *   SET key:str value:str                -> OK
 *   GET key:str                          -> VALUE value:str, once it exists
 *   ADD key:str delta:i64                -> INT result:i64
 *   DEAD                                 -> RANKS n:u32 rank:u32...
 *   BYE                                  -> OK, the rank left cleanly
 *   LEFT                                 -> RANKS n:u32 rank:u32..., those
 *                                           that said BYE
 *   UNWAIT key:str                       -> OK; the connection's GET of key
 *                                           waits no more (its VALUE, where
 *                                           the key came first, came before)
 * Any request may be answered with ERR message:str.  Protocol 1's first
 * frame was HELLO rank:u32 world:u32 token:str, the token in clear: a
 * server of protocol 2 answers it with ERR, and a server of protocol 1
 * answers JOIN with ERR "expected HELLO first". */
#ifndef DDPENV_STORE_PROTO_H
#define DDPENV_STORE_PROTO_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

enum {
	OP_HELLO = 1, /* protocol 1's, refused */
	OP_SET, OP_GET, OP_ADD, OP_DEAD, OP_BYE, OP_UNWAIT, OP_LEFT, OP_JOIN, OP_PROOF,
	REP_OK = 64, REP_VALUE, REP_INT, REP_RANKS, REP_ERR, REP_CHALLENGE,
};

#define STORE_PROTO 2
/* The largest frame either side takes before the handshake is done: a
 * JOIN, a CHALLENGE, a PROOF, or an ERR of the handshake (and protocol
 * 1's HELLO with its 64-character token, to be told why it is refused). */
#define STORE_PREAUTH_FRAME 160
/* The old server's answer to JOIN: the client says which protocol that is. */
#define STORE_PROTO1_ERR "expected HELLO first"

/* Largest frame either side accepts: a maximal key and value plus headers. */
#define STORE_MAX_FRAME (DDPENV_STORE_MAX_VALUE + DDPENV_STORE_MAX_KEY + 64)

static inline void proto_put_u32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static inline uint32_t proto_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static inline void proto_put_i64(uint8_t *p, int64_t v)
{
	proto_put_u32(p, (uint64_t)v >> 32);
	proto_put_u32(p + 4, (uint32_t)v);
}

static inline int64_t proto_get_i64(const uint8_t *p)
{
	return (int64_t)((uint64_t)proto_get_u32(p) << 32 | proto_get_u32(p + 4));
}

/* A cursor over a received frame's fields; ok drops to 0 on overrun. */
struct rd {
	const uint8_t *p;
	size_t left;
	int ok;
};

static inline uint32_t proto_rd_u32(struct rd *r)
{
	if (!r->ok || r->left < 4) {
		r->ok = 0;
		return 0;
	}
	uint32_t v = proto_get_u32(r->p);
	r->p += 4;
	r->left -= 4;
	return v;
}

static inline int64_t proto_rd_i64(struct rd *r)
{
	if (!r->ok || r->left < 8) {
		r->ok = 0;
		return 0;
	}
	int64_t v = proto_get_i64(r->p);
	r->p += 8;
	r->left -= 8;
	return v;
}

static inline const uint8_t *proto_rd_str(struct rd *r, size_t *len)
{
	uint32_t n = proto_rd_u32(r);
	if (!r->ok || r->left < n) {
		r->ok = 0;
		*len = 0;
		return NULL;
	}
	const uint8_t *s = r->p;
	r->p += n;
	r->left -= n;
	*len = n;
	return s;
}

#endif
