/* Numeric addresses: parse, format, classify. */
#include <arpa/inet.h>
#include <string.h>

#include "ddpenv.h"

int ddpenv_addr_parse(const char *s, struct ddpenv_addr *out)
{
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, s, &out->u.v4) == 1) {
		out->family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, &out->u.v6) == 1) {
		out->family = AF_INET6;
		return 0;
	}
	return -1;
}

int ddpenv_addr_format(const struct ddpenv_addr *a, char *buf, size_t len)
{
	const void *p = a->family == AF_INET ? (const void *)&a->u.v4
					     : (const void *)&a->u.v6;

	if (a->family != AF_INET && a->family != AF_INET6)
		return -1;
	return inet_ntop(a->family, p, buf, (socklen_t)len) ? 0 : -1;
}

int ddpenv_addr_is_loopback(const struct ddpenv_addr *a)
{
	if (a->family == AF_INET)
		return (ntohl(a->u.v4.s_addr) >> 24) == 127;
	if (a->family == AF_INET6) {
		if (IN6_IS_ADDR_LOOPBACK(&a->u.v6))
			return 1;
		if (IN6_IS_ADDR_V4MAPPED(&a->u.v6))
			return a->u.v6.s6_addr[12] == 127;
	}
	return 0;
}

int ddpenv_addr_is_linklocal(const struct ddpenv_addr *a)
{
	if (a->family == AF_INET)
		return (ntohl(a->u.v4.s_addr) >> 16) == 0xA9FE; /* 169.254/16 */
	return a->family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&a->u.v6);
}

int ddpenv_addr_same_subnet(const struct ddpenv_addr *a,
			    const struct ddpenv_addr *b, unsigned prefix)
{
	const unsigned char *x, *y;
	unsigned bytes, bits, max;

	if (a->family != b->family)
		return 0;
	if (a->family == AF_INET) {
		x = (const unsigned char *)&a->u.v4;
		y = (const unsigned char *)&b->u.v4;
		max = 32;
	} else {
		x = a->u.v6.s6_addr;
		y = b->u.v6.s6_addr;
		max = 128;
	}
	if (prefix > max)
		prefix = max;
	bytes = prefix / 8;
	bits = prefix % 8;
	if (memcmp(x, y, bytes) != 0)
		return 0;
	if (bits) {
		unsigned char mask = (unsigned char)(0xFF << (8 - bits));
		if ((x[bytes] & mask) != (y[bytes] & mask))
			return 0;
	}
	return 1;
}
