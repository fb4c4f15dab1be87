/*
 * HMAC-SHA256 (RFC 2104), from one of two libraries by where it runs.
 *
 * The step's token is derived in slurmstepd (ddpenv_token_derive), a new
 * process for every step of every node, so what its library costs to load
 * is paid by every step of a site with an rdzv_secret.  OpenSSL's
 * libcrypto costs 1.1 to 2.4 ms there: Debian links it -z now, and its
 * 4,000 symbol relocations are each looked up through slurmstepd's global
 * scope (libslurmfull's 2,900 symbols first), then 17,000 relative ones
 * written; its first HMAC() then sets OpenSSL 3 up (its configuration,
 * its default provider): 1 to 1.5 ms more.  nettle, GnuTLS's crypto
 * library, opens in 0.16 ms (13 page faults) and has no set-up
 * (docs/benchmarks.md).  So the token is nettle's HMAC.
 *
 * The store's proofs are made in the tasks, once per connection, where
 * that cost is nothing beside a training process's start: OpenSSL's
 * HMAC(), with its constant-time comparison (store_auth.c).  The two are
 * checked against each other for keys and messages of every length to
 * past two blocks (tests/unit/test_config.c).  Each library is opened at
 * its first call (libs.c).
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "libs.h"

_Static_assert(SHA256_DIGEST_SIZE == DDPENV_HMAC_LEN, "nettle's SHA-256 digest is an HMAC's length");

int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
		       unsigned char out[DDPENV_HMAC_LEN], char *err, size_t errlen)
{
	const struct ddpenv_crypto_fns *c = ddpenv_crypto(err, errlen);
	unsigned int len = 0;

	if (!c)
		return -1;
	if (klen > INT_MAX ||
	    !c->hmac(c->evp_sha256(), key, (int)klen, msg, mlen, out, &len) || len != DDPENV_HMAC_LEN) {
		snprintf(err, errlen, "HMAC-SHA256 with a key of %zu bytes failed (OpenSSL)", klen);
		return -1;
	}
	return 0;
}

int ddpenv_hmac_sha256_nettle(const void *key, size_t klen, const void *msg, size_t mlen,
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
