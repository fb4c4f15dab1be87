/*
 * HMAC-SHA256 (RFC 2104) over OpenSSL's SHA-256, without its EVP layer.
 * OpenSSL 3's first EVP fetch in a process sets the library up (its
 * configuration, its default provider, the methods of every digest it
 * offers): 1 to 1.5 ms of CPU, where SHA256_Init, _Update and _Final take
 * microseconds.  slurmstepd is a new process for every step and derives
 * the step's token there (ddpenv_token_derive), so a site with an
 * rdzv_secret paid that set-up on every step of every node
 * (docs/benchmarks.md).  Those three calls are deprecated since OpenSSL
 * 3.0, not gone; an OpenSSL built without its deprecated calls gets
 * OpenSSL's HMAC() instead.  libcrypto is opened at the first call
 * (libs.c).  Checked against HMAC() for keys and messages
 * of every length to past two blocks (tests/unit/test_config.c).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "libs.h"

int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
		       unsigned char out[DDPENV_HMAC_LEN], char *err, size_t errlen)
{
	const struct ddpenv_crypto_fns *c = ddpenv_crypto(err, errlen);

	if (!c)
		return -1;
#ifndef OPENSSL_NO_DEPRECATED_3_0
	unsigned char k[SHA256_CBLOCK], pad[SHA256_CBLOCK], inner[SHA256_DIGEST_LENGTH];
	SHA256_CTX ctx;
	int ok = 1;

	memset(k, 0, sizeof(k));
	if (klen > sizeof(k)) /* a long key is its hash */
		ok = c->sha256_init(&ctx) && c->sha256_update(&ctx, key, klen) && c->sha256_final(k, &ctx);
	else if (klen)
		memcpy(k, key, klen);
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x36;
	ok = ok && c->sha256_init(&ctx) && c->sha256_update(&ctx, pad, sizeof(pad)) &&
	     c->sha256_update(&ctx, msg, mlen) && c->sha256_final(inner, &ctx);
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x5c;
	ok = ok && c->sha256_init(&ctx) && c->sha256_update(&ctx, pad, sizeof(pad)) &&
	     c->sha256_update(&ctx, inner, sizeof(inner)) && c->sha256_final(out, &ctx);
	explicit_bzero(k, sizeof(k));
	explicit_bzero(pad, sizeof(pad));
	explicit_bzero(inner, sizeof(inner));
	explicit_bzero(&ctx, sizeof(ctx));
#else
	unsigned int len = 0;
	int ok = c->hmac(c->evp_sha256(), key, (int)klen, msg, mlen, out, &len) && len == DDPENV_HMAC_LEN;
#endif
	if (!ok)
		snprintf(err, errlen, "HMAC-SHA256 failed (OpenSSL)");
	return ok ? 0 : -1;
}
