/* A tiny test harness: TAP lines, non-zero exit on any failure. */
#ifndef DDP_TEST_H
#define DDP_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int t_num, t_fail;

/* TAP lines whole in a pipe: a message the code under test prints to
 * stderr (an error a test provokes) lands between lines, not inside one. */
__attribute__((constructor)) static void test_line_buffered(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
}

#define test_cond(desc, cond) do {                                        \
	t_num++;                                                          \
	if (cond) {                                                       \
		printf("ok %d - %s\n", t_num, desc);                      \
	} else {                                                          \
		t_fail++;                                                 \
		printf("not ok %d - %s (%s:%d)\n", t_num, desc, __FILE__, __LINE__); \
	}                                                                 \
} while (0)

/* A numbered TAP skip: says what did not run and why. */
#define test_skip(desc, why) do {                                         \
	t_num++;                                                          \
	printf("ok %d - %s # SKIP %s\n", t_num, desc, why);              \
} while (0)

#define test_streq(desc, got, want) do {                                  \
	const char *g_ = (got), *w_ = (want);                             \
	int ok_ = g_ && w_ && strcmp(g_, w_) == 0;                        \
	test_cond(desc, ok_);                                             \
	if (!ok_)                                                         \
		printf("#   got '%s', want '%s'\n", g_ ? g_ : "(null)", w_ ? w_ : "(null)"); \
} while (0)

/* err must name every fragment */
#define test_err(desc, err, frag) do {                                    \
	int ok_ = strstr((err), (frag)) != NULL;                          \
	test_cond(desc, ok_);                                             \
	if (!ok_)                                                         \
		printf("#   error '%s' lacks '%s'\n", (err), (frag));         \
} while (0)

/* A port free at the moment of asking (for a store's server), on every
 * address as the store binds it ([::] dual-stack, else 0.0.0.0): a port
 * free on 127.0.0.1 alone may be held on another address (a connection's
 * end still closing there), and the store's bind would fail. */
static inline int test_free_port(void)
{
	int zero = 0, port = 0, fd = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	socklen_t l = sizeof(a6);
	if (fd >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) == 0 &&
	    bind(fd, (struct sockaddr *)&a6, sizeof(a6)) == 0 && getsockname(fd, (struct sockaddr *)&a6, &l) == 0)
		port = ntohs(a6.sin6_port);
	if (fd >= 0)
		close(fd);
	if (port)
		return port;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	l = sizeof(a);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	getsockname(fd, (struct sockaddr *)&a, &l);
	close(fd);
	return ntohs(a.sin_port);
}

#define test_report() (printf("1..%d\n", t_num), t_fail ? 1 : 0)

#endif
