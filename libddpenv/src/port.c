#include <stdio.h>

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
