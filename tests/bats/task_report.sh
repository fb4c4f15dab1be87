#!/bin/bash
# Run as a Slurm task: one line describing what the task sees.
# host rank local_rank world local_world node_rank master_addr master_port
# nccl_if gloo_if if_addr backend omp run_id nccl_async_error_handling use_libuv
ifname=${NCCL_SOCKET_IFNAME:-none}
ifaddr=$(ip -o -4 addr show dev "$ifname" 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -n1)
echo "task $(hostname) ${RANK:-unset} ${LOCAL_RANK:-unset} ${WORLD_SIZE:-unset} ${LOCAL_WORLD_SIZE:-unset}" \
     "${NODE_RANK:-unset} ${MASTER_ADDR:-unset} ${MASTER_PORT:-unset} $ifname ${GLOO_SOCKET_IFNAME:-none}" \
     "${ifaddr:-none} ${DDP_BACKEND:-unset} ${OMP_NUM_THREADS:-unset} ${TORCHELASTIC_RUN_ID:-unset}" \
     "${TORCH_NCCL_ASYNC_ERROR_HANDLING:-unset} ${USE_LIBUV:-unset}"
[ -z "${DDP_REPORT_SLEEP:-}" ] || sleep "$DDP_REPORT_SLEEP"
