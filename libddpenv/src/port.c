#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "ddpenv.h"

int ddpenv_port_for_step(uint32_t job_id, uint32_t step_id, uint16_t lo,
			 uint16_t hi, uint16_t *port, char *err, size_t errlen)
{
	uint64_t n;

	if (lo == 0 || hi < lo) {
		snprintf(err, errlen, "port range %u-%u: expected 1 <= low <= high <= 65535",
			 lo, hi);
		return -1;
	}
	n = (uint64_t)hi - lo + 1;
	*port = (uint16_t)(lo + ((uint64_t)job_id * DDPENV_PORT_STRIDE + step_id) % n);
	return 0;
}

int ddpenv_port_check(int family, uint16_t port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd, one = 1, rv = -1;

	memset(&ss, 0, sizeof(ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = in6addr_any;
		s6->sin6_port = htons(port);
		sl = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_addr.s_addr = htonl(INADDR_ANY);
		s4->sin_port = htons(port);
		sl = sizeof(*s4);
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "cannot test port %u: socket: %s", port, strerror(errno));
		return -1;
	}
	/* As rendezvous servers bind: TIME_WAIT leftovers do not count. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0) {
		snprintf(err, errlen, "port %u: %s", port, strerror(errno));
		goto out;
	}
	rv = 0;
out:
	close(fd);
	return rv;
}
