/*
 * HMAC-SHA256 (RFC 2104): nettle's, GnuTLS's crypto library, opened at its
 * first call (libs.c), for the step's token (ddpenv_token_derive, in
 * slurmstepd) and the store's proofs (store_auth.c, in the tasks).
 *
 * The token is derived in a new slurmstepd for every step of every node,
 * so what its library costs to load is paid by every step of a site with
 * an rdzv_secret: nettle opens in 0.16 ms (13 page faults) and has no
 * set-up.  OpenSSL's libcrypto cost 1.1 to 2.4 ms there (Debian links it
 * -z now: 4,000 symbol relocations looked up through slurmstepd's global
 * scope, 17,000 relative ones written), and its first HMAC() set OpenSSL 3
 * up (its configuration, its default provider), 1 to 1.5 ms more, which
 * each rank paid again for its store's proofs (docs/benchmarks.md).  The
 * tests check nettle's HMAC against RFC 4231's vectors and against
 * OpenSSL's for keys and messages of every length to past two blocks
 * (tests/unit/test_config.c).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "libs.h"

_Static_assert(SHA256_DIGEST_SIZE == DDPENV_HMAC_LEN, "nettle's SHA-256 digest is an HMAC's length");

int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
		       unsigned char out[DDPENV_HMAC_LEN], char *err, size_t errlen)
{
	const struct ddpenv_nettle_fns *n = ddpenv_nettle(err, errlen);
	struct hmac_sha256_ctx ctx;

	if (!n)
		return -1;
	n->hmac_sha256_set_key(&ctx, klen, key);
	n->hmac_sha256_update(&ctx, mlen, msg);
	n->hmac_sha256_digest(&ctx, DDPENV_HMAC_LEN, out);
	explicit_bzero(&ctx, sizeof(ctx)); /* it holds the key's pads */
	return 0;
}

int ddpenv_hmac_equal(const void *a, const void *b, size_t len, char *err, size_t errlen)
{
	const struct ddpenv_nettle_fns *n = ddpenv_nettle(err, errlen);

	if (!n)
		return -1;
	return n->memeql_sec(a, b, len) ? 1 : 0;
}
