/* LD_PRELOAD shim for the Bats tests: an IPv4 or IPv6 bind() to port 0
 * (the kernel's pick) takes BINDPORT_PORT instead, once per process.
 * gloo's pairs listen on such a socket and decide by comparing the two
 * addresses which side connects and which waits; on one host the ports
 * decide, so a test can put rank 0 on the side it means to test. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	static int (*real)(int, const struct sockaddr *, socklen_t);
	static int used;
	if (!real)
		real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
	const char *p = getenv("BINDPORT_PORT");
	int port = p ? atoi(p) : 0;
	if (port <= 0 || port > 65535 || used || !addr)
		return real(fd, addr, len);
	struct sockaddr_storage a;
	in_port_t *at;
	if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in))
		at = &((struct sockaddr_in *)&a)->sin_port;
	else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6))
		at = &((struct sockaddr_in6 *)&a)->sin6_port;
	else
		return real(fd, addr, len);
	socklen_t n = len < sizeof(a) ? len : (socklen_t)sizeof(a);
	memcpy(&a, addr, n);
	if (*at != 0)
		return real(fd, addr, len);
	*at = htons((unsigned short)port);
	used = 1;
	return real(fd, (const struct sockaddr *)&a, n);
}
