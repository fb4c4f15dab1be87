#!/bin/bash
# Run as a task of srun --ddp: one line comparing what the task got with what
# `ddp-env --explain` planned for its local rank on this node.
#   rank=R local=L cpus=<Cpus_allowed_list> plan_cpus=<plan> cvd=<CUDA_VISIBLE_DEVICES>
#   plan_cvd=<plan> busid=<DDP_GPU_BUSID> plan_busid=<plan> omp=<OMP_NUM_THREADS>
repo=$(cd "$(dirname "$0")/../.." && pwd)
explain=$("$repo/build/bin/ddp-env" --explain 2>&1)
cpus=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
row=$(awk -v r="$SLURM_LOCALID" '$1 == "#" && $2 == r && NF >= 9 {print; exit}' <<<"$explain")
read -r _ _ _ pbus _ _ pcpus _ <<<"$row"
pcvd=$(sed -n 's/^# CUDA_VISIBLE_DEVICES=\([^ ]*\).*/\1/p' <<<"$explain")
# MIG devices: each task's own, named in its row's notes
pmig=$(grep -o 'MIG-[^ ]*' <<<"$row" || true)
[ -z "$pmig" ] || pcvd=$pmig
echo "rank=$SLURM_PROCID local=$SLURM_LOCALID cpus=$cpus plan_cpus=${pcpus:-none} cvd=${CUDA_VISIBLE_DEVICES:-unset} plan_cvd=${pcvd:-none} busid=${DDP_GPU_BUSID:-unset} plan_busid=${pbus:-none} omp=${OMP_NUM_THREADS:-unset}"
# The plan's reasons, once per node.
if [ "$SLURM_LOCALID" = 0 ]; then
	grep -E '^# (binding|cpu|gpu|mem):' <<<"$explain" | sed "s/^/node$SLURM_NODEID /"
fi
