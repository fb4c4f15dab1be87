/* The store's handshake proofs (store_auth.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "internal.h"
#include "libs.h"
#include "store_auth.h"
#include "store_proto.h"

_Static_assert(STORE_PROOF_LEN == DDPENV_HMAC_LEN, "a proof is an HMAC-SHA256");

int store_nonce(uint8_t out[STORE_NONCE_LEN])
{
	size_t got = 0;

	while (got < STORE_NONCE_LEN) {
		ssize_t n = getrandom(out + got, STORE_NONCE_LEN - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

int store_proof(const char *token, enum store_role role, const uint8_t cnonce[STORE_NONCE_LEN],
		const uint8_t snonce[STORE_NONCE_LEN], uint32_t rank, uint32_t world,
		uint8_t out[STORE_PROOF_LEN])
{
	static const char *const label[] = { "slurm-ddp store 2 server", "slurm-ddp store 2 client" };
	uint8_t msg[32 + 2 * STORE_NONCE_LEN + 8];
	char why[256]; /* the store opened nettle as it started (store_crypto) */
	size_t ll = strlen(label[role]), n = 0;

	if (!token || !*token)
		return -1;
	memcpy(msg, label[role], ll + 1); /* its NUL ends the label */
	n = ll + 1;
	memcpy(msg + n, cnonce, STORE_NONCE_LEN);
	n += STORE_NONCE_LEN;
	memcpy(msg + n, snonce, STORE_NONCE_LEN);
	n += STORE_NONCE_LEN;
	proto_put_u32(msg + n, rank);
	proto_put_u32(msg + n + 4, world);
	n += 8;
	return ddpenv_hmac_sha256(token, strlen(token), msg, n, out, why, sizeof(why));
}

int store_proof_ok(const char *token, enum store_role role, const uint8_t cnonce[STORE_NONCE_LEN],
		   const uint8_t snonce[STORE_NONCE_LEN], uint32_t rank, uint32_t world,
		   const uint8_t *got, size_t len)
{
	uint8_t want[STORE_PROOF_LEN];
	char why[256];
	int ok;

	if (len != STORE_PROOF_LEN || store_proof(token, role, cnonce, snonce, rank, world, want) < 0)
		return 0;
	ok = ddpenv_hmac_equal(want, got, STORE_PROOF_LEN, why, sizeof(why)) == 1;
	explicit_bzero(want, sizeof(want));
	return ok;
}

int store_crypto(const char *token, char *err, size_t errlen)
{
	char why[256];

	if (!token || !*token || ddpenv_nettle(why, sizeof(why)))
		return 0;
	snprintf(err, errlen, "the rendezvous token needs %s", why);
	return -1;
}
