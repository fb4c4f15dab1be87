/* The rendezvous store's wire format by hand (libddpenv/src/store_proto.h),
 * for the tests that play a client or a server that is not libddpenv's:
 * frames, the handshake of protocol 2 without a token. */
#ifndef DDP_TEST_STORE_RAW_H
#define DDP_TEST_STORE_RAW_H

#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Raw frames for the tests that speak the wire format (store_proto.h). */
static inline size_t frame(uint8_t *out, int op, const char *key, const char *val)
{
	size_t n = 1, kl = key ? strlen(key) : 0, vl = val ? strlen(val) : 0;
	uint8_t *p = out + 5;
	if (key) {
		n += 4 + kl;
		p[0] = p[1] = 0, p[2] = (uint8_t)(kl >> 8), p[3] = (uint8_t)kl;
		memcpy(p + 4, key, kl);
		p += 4 + kl;
	}
	if (val) {
		n += 4 + vl;
		p[0] = p[1] = 0, p[2] = (uint8_t)(vl >> 8), p[3] = (uint8_t)vl;
		memcpy(p + 4, val, vl);
	}
	out[0] = out[1] = 0, out[2] = (uint8_t)(n >> 8), out[3] = (uint8_t)n;
	out[4] = (uint8_t)op;
	return 4 + n;
}

/* One frame's body (op first) into buf: its length, -1 none by the socket's timeout. */
static inline int read_raw(int fd, uint8_t *buf, size_t cap)
{
	uint8_t h[4];
	size_t got = 0, n;
	ssize_t r;
	while (got < 4 && (r = recv(fd, h + got, 4 - got, 0)) > 0)
		got += (size_t)r;
	if (got < 4)
		return -1;
	n = (size_t)h[2] << 8 | h[3];
	if (n > cap)
		return -1;
	for (got = 0; got < n && (r = recv(fd, buf + got, n - got, 0)) > 0;)
		got += (size_t)r;
	return got == n ? (int)n : -1;
}

/* The handshake of store protocol 2 (store_proto.h) on fd as rank of
 * world, with no token (an empty proof): 1 joined, 0 not. */
static inline int raw_join(int fd, int rank, int world)
{
	uint8_t join[53] = { 0, 0, 0, 49, 9 /* JOIN */, 0, 0, 0, 2 /* protocol */ }, rep[256];
	static const uint8_t proof[] = { 0, 0, 0, 5, 10 /* PROOF */, 0, 0, 0, 0 };

	join[12] = (uint8_t)rank;
	join[16] = (uint8_t)world;
	join[20] = 32; /* the nonce's length; its bytes 0 */
	return fd >= 0 && send(fd, join, sizeof(join), 0) == sizeof(join) &&
	       read_raw(fd, rep, sizeof(rep)) == 45 && rep[0] == 69 /* CHALLENGE, no proof */ &&
	       send(fd, proof, sizeof(proof), 0) == sizeof(proof) && read_raw(fd, rep, sizeof(rep)) == 1 &&
	       rep[0] == 64;
}

static inline int raw_connect(int port, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timeval tv = { timeout_ms / 1000, timeout_ms % 1000 * 1000 };
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

#endif
