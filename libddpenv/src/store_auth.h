/* The store's handshake proofs: each side shows that it holds the step's
 * rendezvous token without sending it.
 *
 * Protocol 2 (store_proto.h): the client sends JOIN with a fresh nonce,
 * the server answers CHALLENGE with its own nonce and its proof, the
 * client checks that proof and sends its own.  A proof is
 * HMAC-SHA256(token, label | client nonce | server nonce | rank | world)
 * with a label per side, so that neither side's proof can stand for the
 * other's, and both name the rank and world the client claimed. */
#ifndef DDPENV_STORE_AUTH_H
#define DDPENV_STORE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define STORE_NONCE_LEN 32
#define STORE_PROOF_LEN 32

enum store_role { STORE_SERVER, STORE_CLIENT };

/* A fresh nonce from the kernel's random source: 0, or -1 (errno set). */
int store_nonce(uint8_t out[STORE_NONCE_LEN]);

/* The proof of role over the handshake's nonces and claim: 0, or -1 (no
 * token, or nettle cannot be opened). */
int store_proof(const char *token, enum store_role role, const uint8_t cnonce[STORE_NONCE_LEN],
		const uint8_t snonce[STORE_NONCE_LEN], uint32_t rank, uint32_t world,
		uint8_t out[STORE_PROOF_LEN]);

/* With a token, the proofs' library (nettle, opened at its first use): 0,
 * else -1 with err.  Called as a store starts or a client joins, so that a
 * missing nettle is said as such, not as a failed handshake. */
int store_crypto(const char *token, char *err, size_t errlen);

/* Whether got (len bytes) is the proof of role: compared in constant time. */
int store_proof_ok(const char *token, enum store_role role, const uint8_t cnonce[STORE_NONCE_LEN],
		   const uint8_t snonce[STORE_NONCE_LEN], uint32_t rank, uint32_t world,
		   const uint8_t *got, size_t len);

#endif
