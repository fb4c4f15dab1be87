/* Helpers shared inside libddpenv; not part of the API. */
#ifndef DDPENV_INTERNAL_H
#define DDPENV_INTERNAL_H

#include <stdint.h>
#include <stddef.h>

int ddpenv_parse_u32(const char *key, const char *s, uint32_t *out,
		     char *err, size_t errlen);

#endif
