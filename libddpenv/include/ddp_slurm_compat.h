/*
 * Every difference between the Slurm releases slurm-ddp builds against
 * (22.05 to 26.05), in one place: the rest of the tree includes this header
 * and never tests SLURM_VERSION_NUMBER itself.  Internal to the build (not
 * installed).  Each release's own <slurm/...> headers come from its
 * libslurm-dev; nothing here copies Slurm's declarations (the two
 * libslurm-internal functions NodeAddr needs are declared weak in
 * libddpenv/src/slurm_nodeaddr.c).
 *
 * What changed, release by release, and how each is met:
 *   22.05  slurm_get_errno() returns errno: the tree reads errno on every
 *          release (24.11 removed the function).
 *   23.02  uid/gid 99 (SLURM_AUTH_NOBODY) from a client means "not set": the
 *          plugin reads no uid or gid from Slurm (one that does must refuse 99
 *          from 23.02 on).  23.02.1 (fatal from 23.11.1): no libslurm call
 *          that needs the configuration before slurm_init(): ddp-env calls it
 *          before reading NodeAddr, ddp-check's query child before asking
 *          slurmctld; host lists need no configuration.
 *   23.11  hostlist_t is the struct and the functions take hostlist_t *:
 *          ddp_hostlist_t.  A failing SPANK callback fails the step and
 *          srun/salloc/sbatch --wait exit 1; the message the plugin writes
 *          with slurm_error() still reaches the user.
 *   24.05  remote option callbacks run once, not twice: the plugin's are
 *          idempotent (spank/ddp_option.c).
 *   24.11  List/ListIterator are gone (list_t *): not used here.
 *   25.05  slurm_spank_init_failure_mode: DDP_SPANK_FAILURE_MODE declares
 *          ESPANK_JOB_FAILURE, so no error of the plugin drains a node; any
 *          non-zero return is a failure (the hooks return 0 or -1 only).
 */
#ifndef DDP_SLURM_COMPAT_H
#define DDP_SLURM_COMPAT_H

#include <slurm/slurm_version.h>
#include <slurm/slurm.h>

#define DDP_SLURM_AT_LEAST(maj, min) (SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(maj, min, 0))

/* 23.11: "typedef struct hostlist hostlist_t" (before: a pointer typedef) */
#if DDP_SLURM_AT_LEAST(23, 11)
typedef hostlist_t *ddp_hostlist_t;
#else
typedef hostlist_t ddp_hostlist_t;
#endif

/* 25.05: the plugin says that its failures fail the job, never the node.
 * Used once, at file scope, in spank/spank_ddp.c. */
#if DDP_SLURM_AT_LEAST(25, 5)
#define DDP_SPANK_FAILURE_MODE int slurm_spank_init_failure_mode = ESPANK_JOB_FAILURE
#else
#define DDP_SPANK_FAILURE_MODE extern int ddp_spank_failure_mode_unknown_before_25_05
#endif

#endif
