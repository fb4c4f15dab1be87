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
 * OpenSSL's HMAC() instead.  Checked against HMAC() for keys and messages
 * of every length to past two blocks (tests/unit/test_config.c).
 */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "internal.h"

int ddpenv_hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
		       unsigned char out[DDPENV_HMAC_LEN])
{
#ifndef OPENSSL_NO_DEPRECATED_3_0
	unsigned char k[SHA256_CBLOCK], pad[SHA256_CBLOCK], inner[SHA256_DIGEST_LENGTH];
	SHA256_CTX c;
	int ok = 1;

	memset(k, 0, sizeof(k));
	if (klen > sizeof(k)) /* a long key is its hash */
		ok = SHA256_Init(&c) && SHA256_Update(&c, key, klen) && SHA256_Final(k, &c);
	else if (klen)
		memcpy(k, key, klen);
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x36;
	ok = ok && SHA256_Init(&c) && SHA256_Update(&c, pad, sizeof(pad)) && SHA256_Update(&c, msg, mlen) &&
	     SHA256_Final(inner, &c);
	for (size_t i = 0; i < sizeof(pad); i++)
		pad[i] = k[i] ^ 0x5c;
	ok = ok && SHA256_Init(&c) && SHA256_Update(&c, pad, sizeof(pad)) &&
	     SHA256_Update(&c, inner, sizeof(inner)) && SHA256_Final(out, &c);
	OPENSSL_cleanse(k, sizeof(k));
	OPENSSL_cleanse(pad, sizeof(pad));
	OPENSSL_cleanse(inner, sizeof(inner));
	OPENSSL_cleanse(&c, sizeof(c));
	return ok ? 0 : -1;
#else
	unsigned int len = 0;

	return HMAC(EVP_sha256(), key, (int)klen, msg, mlen, out, &len) && len == DDPENV_HMAC_LEN ? 0 : -1;
#endif
}
