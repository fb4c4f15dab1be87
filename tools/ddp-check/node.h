/* ddp-check --node: one node alone, without srun or peers, for Slurm's
 * HealthCheckProgram or a prolog.  Its GPUs' and RDMA devices' PCIe links
 * and its RDMA ports are judged as in a step (hw.pcie, net.fabric, as
 * NCCL would use them); with --drain a failure drains the node through
 * scontrol, the check and its message as the reason. */
#ifndef CK_NODE_H
#define CK_NODE_H

#include "opts.h"

/* The exit status: 0 every check OK or WARN, 1 a check FAILED (NHC's
 * convention: Slurm logs a HealthCheckProgram's failure), 2 a set-up
 * error. */
int ck_node_run(const struct ck_cli *cli);

#endif
