/* libFuzzer target: ddp.yaml.  Any bytes must give either settings or an
 * error naming where, never a crash, a leak, undefined behaviour or a hang.
 *   make fuzz   (long)     tests/run.sh fuzz   (short, part of make check) */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ddpenv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ddpenv_config c;
	static struct ddpenv_settings e;
	char err[DDPENV_ERRLEN];
	char *av[1];

	ddpenv_config_init(&c);
	if (ddpenv_config_parse(&c, "fuzz.yaml", data, size, err, sizeof(err)) < 0) {
		/* Every error says where: the name, then a position or a cause. */
		if (strncmp(err, "fuzz.yaml", 9) != 0)
			__builtin_trap();
		ddpenv_config_free(&c);
		return 0;
	}
	if (ddpenv_config_effective(&c, NULL, NULL, &e, err, sizeof(err)) < 0)
		__builtin_trap(); /* a valid file always gives settings */
	for (size_t i = 0; i < c.nparts; i++)
		if (ddpenv_config_effective(&c, c.parts[i].name, NULL, &e, err, sizeof(err)) < 0)
			__builtin_trap();
	/* The same bytes as one plugstack.conf argument. */
	char arg[256];
	size_t n = size < sizeof(arg) - 1 ? size : sizeof(arg) - 1;
	memcpy(arg, data, n);
	arg[n] = '\0';
	av[0] = arg;
	if (strncmp(arg, "config=", 7) != 0)
		(void)ddpenv_config_plugstack(&c, 1, av, err, sizeof(err));
	ddpenv_config_free(&c);
	return 0;
}
