#!/usr/bin/env bats
# GPU sharing GRES on a real Slurm: gres/shard (Slurm 22.05+) and gres/mps.
# Slurm gives the tasks of a node shares of one GPU: the same
# CUDA_VISIBLE_DEVICES, with SLURM_SHARDS_ON_NODE or
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.  NCCL runs one rank per GPU, MPS or
# not (NVIDIA/nccl#418), so --ddp=auto takes gloo when a node of the step
# runs several tasks, an explicit --ddp=nccl fails before the task starts
# and says why, and ddp-check reports the sharing as what was asked for.
# bats file_tags=slurm

load helpers

cluster_file 2 DDP_CLUSTER_SHARING=shard:8

setup() {
	as_user # the jobs are the unprivileged user's
	CHECK="$REPO/build/bin/ddp-check"
	ARGS=(--timeout 40 -e 4K -n 5 -w 1)
}

teardown() {
	dump_logs_on_failure
}

@test "Slurm gives two tasks shards of one GPU: the same CUDA_VISIBLE_DEVICES, SLURM_SHARDS_ON_NODE" {
	run --separate-stderr crun srun -N1 -n2 --gres=shard:2 bash -c \
		'echo "$SLURM_PROCID $SLURM_STEP_GPUS $CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE"'
	assert_success
	assert_line "0 0 0 2"
	assert_line "1 0 0 2"
}

@test "bare --ddp on shards: gloo when a node runs several tasks, saying why, in the task too" {
	run --separate-stderr crun srun --ddp -N1 -n2 --gres=shard:2 bash -c \
		'echo "$SLURM_PROCID $DDP_BACKEND cvd=$CUDA_VISIBLE_DEVICES"; '"$REPO"'/build/bin/ddp-env --explain | grep -e "^DDP_BACKEND " -e "^CUDA_VISIBLE_DEVICES "'
	assert_success
	assert_line --regexp "^CUDA_VISIBLE_DEVICES +0 +all the step's GPUs here; 2 tasks share 1 GPU: this task's is index 0 \(LOCAL_RANK mod 1\)$"
	assert_line "0 gloo cvd=0"
	assert_line "1 gloo cvd=0"
	assert_line --regexp "^DDP_BACKEND +gloo +--ddp=auto: the step's GPUs are shared \(gres/shard\) and a node runs several tasks; NCCL runs one rank per GPU$"
}

@test "bare --ddp on shards, one task per node: nccl (decided on the whole step)" {
	run --separate-stderr crun srun --ddp -N2 -n2 --gres=shard:1 bash -c 'echo "$SLURM_PROCID $DDP_BACKEND_FROM"'
	assert_success
	assert_line "0 --ddp=auto: the step has GPUs (gres/shard, one task per node)"
	assert_line "1 --ddp=auto: the step has GPUs (gres/shard, one task per node)"
	# 2 tasks on node1 and 1 on node2: node2 takes gloo as node1 does
	run --separate-stderr crun srun --ddp -N2 -n3 --gres=shard:2 bash -c 'echo "$SLURM_NODEID $DDP_BACKEND"'
	assert_success
	assert_equal "$(sort -u <<<"$output")" "$(printf '0 gloo\n1 gloo')"
}

@test "--ddp=nccl on two tasks' shards of one GPU fails before the tasks start, naming the sharing" {
	run --separate-stderr crun srun --ddp=nccl -N1 -n2 --gres=shard:2 true
	assert_failure
	assert_equal "$output" ""
	[[ "$stderr" == *"node 0 runs 2 tasks of the step on 1 shared GPU(s) (gres/shard, SLURM_STEP_GPUS): NCCL cannot share a GPU between ranks, even with MPS; use --ddp=gloo"* ]]
}

@test "ddp-check on shards over gloo: the shared GPU is named, as asked for, and all is OK" {
	run --separate-stderr crun srun --ddp -N2 --ntasks-per-node=2 --gres=shard:2 "$CHECK" "${ARGS[@]}"
	echo "$output"
	assert_success
	assert_line --regexp "^OK +bind\.gpus +GPUs shared as gres/shard gave them: node1: GPU 0 of CUDA_VISIBLE_DEVICES by tasks 0, 1; node2: GPU 0 of CUDA_VISIBLE_DEVICES by tasks 2, 3 "
	assert_line --regexp "^SKIP +bind\.locality +the tasks' GPUs have no PCI bus id"
	assert_line --regexp "^ddp-check: [0-9]+ checks OK, 0 WARN, 0 FAILED"
}

@test "gres/mps: the same, from CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" {
	cluster_stop
	DDP_CLUSTER_SHARING=mps:400 cluster_start 2
	run --separate-stderr crun srun --ddp -N1 -n2 --gres=mps:50 bash -c \
		'echo "$SLURM_PROCID $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_VISIBLE_DEVICES $DDP_BACKEND $DDP_BACKEND_FROM"'
	assert_success
	assert_line "0 50 0 gloo --ddp=auto: the step's GPUs are shared (gres/mps) and a node runs several tasks; NCCL runs one rank per GPU"
	assert_line "1 50 0 gloo --ddp=auto: the step's GPUs are shared (gres/mps) and a node runs several tasks; NCCL runs one rank per GPU"
	run --separate-stderr crun srun --ddp=nccl -N1 -n2 --gres=mps:50 true
	assert_failure
	[[ "$stderr" == *"on 1 shared GPU(s) (gres/mps, SLURM_STEP_GPUS): NCCL cannot share a GPU between ranks, even with MPS"* ]]
}
