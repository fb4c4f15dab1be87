#include <stdio.h>
#include <string.h>

#include "ddpenv.h"

static const char *const names[] = {
	[DDPENV_BACKEND_AUTO] = "auto",
	[DDPENV_BACKEND_NCCL] = "nccl",
	[DDPENV_BACKEND_GLOO] = "gloo",
};

int ddpenv_backend_parse(const char *s, enum ddpenv_backend *out,
			 char *err, size_t errlen)
{
	if (!s) {
		*out = DDPENV_BACKEND_AUTO;
		return 0;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (enum ddpenv_backend)i;
			return 0;
		}
	}
	snprintf(err, errlen, "--ddp=%.64s: %s (expected nccl, gloo or auto)",
		 s, *s ? "unknown backend" : "empty backend");
	return -1;
}

const char *ddpenv_backend_name(enum ddpenv_backend b)
{
	return (unsigned)b < sizeof(names) / sizeof(names[0]) ? names[b] : "?";
}
