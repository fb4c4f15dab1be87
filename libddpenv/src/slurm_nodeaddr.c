/*
 * Slurm's NodeAddr of a node, from the configuration libslurm has loaded:
 * slurmstepd's own, or a CLI's after slurm_init().  No RPC, no lookup.
 *
 * slurm_conf_get_address() and slurm_xfree() are libslurm-internal
 * (src/common/read_config.h, xmalloc.h), exported by every release from
 * 22.05 to 26.05 but outside the API SchedMD keeps stable.  They are
 * declared weak: a libslurm (or slurmstepd) without them leaves the NodeAddr
 * fallback unavailable, said as such, instead of the plugin failing to load.
 */
#include <string.h>

#include "ddp_slurm_compat.h"
#include "ddpenv.h"

extern char *slurm_conf_get_address(const char *node_name) __attribute__((weak));
extern void slurm_xfree(void **p) __attribute__((weak));

int ddpenv_slurm_has_nodeaddr(void)
{
	return slurm_conf_get_address && slurm_xfree;
}

int ddpenv_slurm_nodeaddr(void *ctx, const char *node, char *out, size_t len)
{
	char *a;
	int rv = -1;

	(void)ctx;
	if (!ddpenv_slurm_has_nodeaddr() || !node)
		return -1;
	a = slurm_conf_get_address(node);
	if (a && strlen(a) < len) {
		strcpy(out, a);
		rv = 0;
	}
	if (a)
		slurm_xfree((void **)&a);
	return rv;
}
